set terminal pngcairo noenhanced size 600,520 font 'sans,10'
set output '/tmp/pace/a-base-1/latency.png'
set multiplot layout 1,1
set logscale xy
set xlabel 'subscribers'
set ylabel 'latency (ms)'
set grid
set key below
set title 'fixed rate 1000 msg/s'
plot '/tmp/pace/a-base-1/plot/fanout_pgbus.dat' using 1:3 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'pgbus_stream p50', \
     '/tmp/pace/a-base-1/plot/fanout_pgbus.dat' using 1:4 with linespoints lw 2 dt 2 pt 5 lc rgb '#1f77b4' title 'pgbus_stream p99'
unset multiplot
