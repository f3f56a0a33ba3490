# 051_file_limits: the listener under the open-files limit a service gets.
#
# The workers are (re)started by a postmaster whose limit is set with
# prlimit, as systemd sets it (soft 1 024; hard 20 000 here):
# A. One worker, 2 000 simultaneous connects: every client gets a status
#    line (200, or 503 with Retry-After) within a few seconds; none is left
#    in the kernel's accept queue. The worker logs its limit.
# B. Hard limit 1 024 too (nothing to raise to): still every client is
#    answered, the ones beyond what the worker can hold with 503 +
#    Retry-After; the log says why, with the systemd setting to change; the
#    worker still serves and delivers afterwards.
# C. Four workers, 10 000 simultaneous connects from five client processes:
#    all answered.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $e2e = "$FindBin::Bin/../e2e";
my $bin = "$e2e/connect_burst";
if (!-x $bin && -f "$e2e/Makefile")
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'make', '-C', $e2e, 'connect_burst' ], '>', \$out, '2>', \$err);
	note "building connect_burst: $out$err";
}
BAIL_OUT("no connect_burst binary ($bin)") unless -x $bin;
my ($prlimit_ok) = (system('prlimit --version >/dev/null 2>&1') == 0);
BAIL_OUT('prlimit (util-linux) is needed') unless $prlimit_ok;

# limit_workers sets the postmaster's open-files limit and restarts the
# workers under it (the postmaster starts them again within a second).
sub limit_workers
{
	my ($pg, $soft, $hard, $n) = @_;
	my ($pm) = slurp_file($pg->data_dir . '/postmaster.pid') =~ /^(\d+)/;
	is(system("prlimit --pid $pm --nofile=$soft:$hard"), 0, "postmaster limit $soft:$hard");
	my @old = $pg->worker_pids;
	$pg->expect_exit($_, 1) for @old;
	kill 'TERM', @old;
	my @new = $pg->wait_workers($n, exclude => \@old);
	is(scalar @new, $n, "$n worker(s) restarted under it");
	ok($pg->wait_http_ready(30), 'listening');
	return @new;
}

# burst runs $procs client processes of $n connections each at once and
# sums their answers.
sub burst
{
	my ($pg, $procs, $n, $timeout) = @_;
	my (@h, @out);
	for my $i (0 .. $procs - 1)
	{
		$out[$i] = '';
		push @h,
		  IPC::Run::start([ $bin, $pg->http_port, '/streams/s', $n, $timeout ],
			'>', \$out[$i], '2>', \$out[$i]);
	}
	$_->finish for @h;
	my %sum;
	for my $o (@out)
	{
		note "connect_burst: $o";
		while ($o =~ /(\w+)=(\d+)/g)
		{
			if ($1 eq 'slowest_ms') { $sum{$1} = $2 if ($sum{$1} // 0) < $2 }
			else { $sum{$1} += $2 }
		}
	}
	return \%sum;
}

# ---------------------------------------------------------------- A
my $pg = PgbusNode->new('fds', conf => "pgbus_stream.max_connections = 10000\n");
$pg->create_stream('s');
limit_workers($pg, 1024, 20000, 1);
my $t0 = time;
my $r = burst($pg, 1, 2000, 20);
is($r->{answered}, 2000, "2 000 simultaneous connects, soft limit 1 024: all answered "
	  . "($r->{ok} x 200, $r->{unavailable} x 503, slowest $r->{slowest_ms} ms)");
is($r->{reset} + $r->{unanswered}, 0, 'none reset or left waiting');
cmp_ok($r->{slowest_ms}, '<', 10000, 'within a few seconds');
is($r->{other}, 0, 'no other status');
like(slurp_file($pg->logfile), qr/worker 0 open files limit 20000 \(soft limit was 1024\)/,
	'the worker raised its soft limit and logged it');

# ---------------------------------------------------------------- B
limit_workers($pg, 1024, 1024, 1);
$r = burst($pg, 1, 2000, 20);
is($r->{answered}, 2000, "hard limit 1 024: all 2 000 answered "
	  . "($r->{ok} x 200, $r->{unavailable} x 503, slowest $r->{slowest_ms} ms)");
is($r->{reset} + $r->{unanswered}, 0, 'none reset or left waiting');
cmp_ok($r->{ok}, '>', 100, 'a good part is held');
cmp_ok($r->{unavailable}, '>', 0, 'the rest get 503');
is($r->{retry_after}, $r->{unavailable}, 'every 503 carries Retry-After');
like(slurp_file($pg->logfile), qr/can hold \d+ SSE connections .*open files limit is 1024.*\n.*LimitNOFILE=/,
	'the log says why, and names LimitNOFILE=');
my $c = $pg->open_stream('s');
is($c->status, 200, 'after the burst: a new client is served');
$pg->broadcast('s', 'after the burst');
ok($c->wait_for_data_events(1, 10), 'and receives a broadcast (queries still work)');
$c->close;
$pg->finish;

# ---------------------------------------------------------------- C
my $pg4 = PgbusNode->new('fds4', conf => "pgbus_stream.workers = 4\npgbus_stream.max_connections = 12000\n");
$pg4->create_stream('s');
limit_workers($pg4, 1024, 20000, 4);
$r = burst($pg4, 5, 2000, 60);
is($r->{answered}, 10000, "10 000 simultaneous connects on 4 workers: all answered "
	  . "($r->{ok} x 200, $r->{unavailable} x 503, slowest $r->{slowest_ms} ms)");
is($r->{reset} + $r->{unanswered}, 0, 'none reset or left waiting');
$pg4->finish;

done_testing();
