set terminal pngcairo noenhanced size 600,520 font 'sans,10'
set output '/tmp/pace/a-t2500-3/throughput.png'
set multiplot layout 1,1
set logscale xy
set xlabel 'subscribers'
set ylabel 'deliveries/s'
set grid
set key below
set title 'fixed rate 1000 msg/s'
plot '/tmp/pace/a-t2500-3/plot/fanout_pgbus.dat' using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'pgbus_stream'
unset multiplot
