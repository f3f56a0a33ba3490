set terminal pngcairo noenhanced size 1200,520 font 'sans,10'
set output '/work/main/bench/results/20261202-073358/latency.png'
set multiplot layout 1,2
set logscale xy
set xlabel 'subscribers'
set ylabel 'latency (ms)'
set grid
set key below
set title 'fixed rate 1000 msg/s'
plot '/work/main/bench/results/20261202-073358/plot/fanout_pgbus.dat' using 1:3 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'pgbus_stream p50', \
     '/work/main/bench/results/20261202-073358/plot/fanout_pgbus.dat' using 1:4 with linespoints lw 2 dt 2 pt 5 lc rgb '#1f77b4' title 'pgbus_stream p99', \
     '/work/main/bench/results/20261202-073358/plot/fanout_nchan.dat' using 1:3 with linespoints lw 2 pt 7 lc rgb '#2ca02c' title 'nginx+nchan p50', \
     '/work/main/bench/results/20261202-073358/plot/fanout_nchan.dat' using 1:4 with linespoints lw 2 dt 2 pt 5 lc rgb '#2ca02c' title 'nginx+nchan p99', \
     '/work/main/bench/results/20261202-073358/plot/fanout_relay.dat' using 1:3 with linespoints lw 2 pt 7 lc rgb '#d62728' title 'NOTIFY relay (node) p50', \
     '/work/main/bench/results/20261202-073358/plot/fanout_relay.dat' using 1:4 with linespoints lw 2 dt 2 pt 5 lc rgb '#d62728' title 'NOTIFY relay (node) p99'
set title 'saturation'
plot '/work/main/bench/results/20261202-073358/plot/saturation_pgbus.dat' using 1:3 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'pgbus_stream p50', \
     '/work/main/bench/results/20261202-073358/plot/saturation_pgbus.dat' using 1:4 with linespoints lw 2 dt 2 pt 5 lc rgb '#1f77b4' title 'pgbus_stream p99', \
     '/work/main/bench/results/20261202-073358/plot/saturation_nchan.dat' using 1:3 with linespoints lw 2 pt 7 lc rgb '#2ca02c' title 'nginx+nchan p50', \
     '/work/main/bench/results/20261202-073358/plot/saturation_nchan.dat' using 1:4 with linespoints lw 2 dt 2 pt 5 lc rgb '#2ca02c' title 'nginx+nchan p99', \
     '/work/main/bench/results/20261202-073358/plot/saturation_relay.dat' using 1:3 with linespoints lw 2 pt 7 lc rgb '#d62728' title 'NOTIFY relay (node) p50', \
     '/work/main/bench/results/20261202-073358/plot/saturation_relay.dat' using 1:4 with linespoints lw 2 dt 2 pt 5 lc rgb '#d62728' title 'NOTIFY relay (node) p99'
unset multiplot
