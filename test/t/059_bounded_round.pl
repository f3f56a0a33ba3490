# 059_bounded_round: a worker round over many rows too large for the ring
# reads them a page at a time.
#
# A subscriber is connected to a stream. The worker is stopped (SIGSTOP)
# while 40 transactions commit 300 rows of ~9 kB each (above
# inline_payload_max, so the ring carries only their ids), then resumed: its
# next drain holds all 12 000 events, whose rows (about 110 MB) the tables
# must supply. The subscriber gets every row once and in order, and the
# worker's peak memory rises by less than 64 MB. Reading the round's rows in
# one query per stream holds them all at once.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my ($TX, $PER_TX) = (40, 300);
my $ROWS = $TX * $PER_TX;
my $BOUND_KB = 64 * 1024;

my $pg = PgbusNode->new('biground', conf => "shared_buffers = 16MB\npgbus_stream.workers = 1\n");
$pg->create_stream('wide', public => 1);
my ($qs, $qt) = split /\|/,
  $pg->safe_psql('postgres', "SELECT queue_schema, queue_table FROM pgbus_stream.streams WHERE name = 'wide'");
my ($worker) = $pg->worker_pids;
ok($worker, "worker pid $worker");

my $c = $pg->sse('/streams/wide', timeout => 30);
is($c->status, 200, 'subscriber connected');
$pg->safe_psql('postgres', qq{INSERT INTO "$qs"."$qt" (message) VALUES ('{"html": "row 0"}')});
ok($c->wait_for_data_events(1, 20), 'a first row arrives live');
$c->take_events;
$c->forget_taken;

sub status_kb
{
	my %v;
	open my $fh, '<', "/proc/$worker/status" or return {};
	while (<$fh>) { $v{$1} = $2 if /^(VmRSS|VmHWM|RssAnon):\s+(\d+) kB/ }
	close $fh;
	return \%v;
}

ok(kill('STOP', $worker), 'worker stopped');
for my $t (0 .. $TX - 1)
{
	my ($lo, $hi) = ($t * $PER_TX + 1, ($t + 1) * $PER_TX);
	$pg->safe_psql('postgres',
		qq{INSERT INTO "$qs"."$qt" (message) SELECT jsonb_build_object('html', 'row ' || i || ' ' || repeat('w', 9000)) FROM generate_series($lo, $hi) i}
	);
}
my $cr;
my $reset = open($cr, '>', "/proc/$worker/clear_refs") && print($cr "5\n") && close($cr);
my $before = status_kb();
ok(kill('CONT', $worker), 'worker resumed');

my ($next, $bad) = (1, undef);
my $deadline = time + 240;
while ($next <= $ROWS && time < $deadline && !$c->closed)
{
	$c->poll(0.2);
	for my $f ($c->take_events)
	{
		next unless defined $f->{id};
		my ($n) = ($f->{data} // '') =~ /^row (\d+) /;
		$bad //= "expected row $next, got: " . substr($f->{data} // 'undef', 0, 40)
		  if !defined $n || $n != $next;
		$next++;
	}
	$c->forget_taken;
}
is($next - 1, $ROWS, "every row arrived ($ROWS)");
ok(!defined $bad, 'in order, none twice') or diag($bad);
$c->close;

my $after = status_kb();
my $growth = $after->{VmHWM} - $before->{VmRSS};
note(sprintf('worker: VmRSS before %d kB, VmHWM after %d kB (peak %s), RssAnon %d kB',
		$before->{VmRSS}, $after->{VmHWM}, $reset ? 'reset' : 'since start', $after->{RssAnon}));
cmp_ok($growth, '<', $BOUND_KB,
	sprintf('worker peak memory rose by %.1f MB over the round (bound: 64 MB)', $growth / 1024));

$pg->finish;
done_testing();
