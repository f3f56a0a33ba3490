# 056_bounded_replay: a replay far larger than the stream is paged, not read
# at once.
#
# A stream holds 200 000 rows of ~300 bytes. A client asks for
# ?replay=100000000 (more than the stream has): it is answered at once (the
# preamble and the first rows arrive while most of the stream is still to
# come), every row arrives in order with none twice, and the worker's peak
# memory while serving it (VmHWM, shared pages it touched included; shared
# buffers are kept at 16 MB so they cannot hide much) rises by less than
# 64 MB. Reading the rows to replay in one query holds them all in the worker
# at once (over 150 MB here).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(parse_token);

my $ROWS = 200_000;
my $BOUND_KB = 64 * 1024;

my $pg = PgbusNode->new('bigreplay', conf => "shared_buffers = 16MB\npgbus_stream.workers = 1\n");
$pg->create_stream('big');
my ($qs, $qt) = split /\|/,
  $pg->safe_psql('postgres', "SELECT queue_schema, queue_table FROM pgbus_stream.streams WHERE name = 'big'");
for my $part (0 .. 3)
{
	my ($lo, $hi) = ($part * $ROWS / 4 + 1, ($part + 1) * $ROWS / 4);
	$pg->safe_psql('postgres',
		qq{INSERT INTO "$qs"."$qt" (message) SELECT jsonb_build_object('html', 'row ' || i || ' ' || repeat('r', 280)) FROM generate_series($lo, $hi) i}
	);
}
is($pg->safe_psql('postgres', qq{SELECT count(*) FROM "$qs"."$qt"}), $ROWS, "$ROWS rows in the stream");

my ($worker) = $pg->worker_pids;
ok($worker, "worker pid $worker");
# The worker reads what the producers committed first (rows past the
# ring's inline budget are read back from the table); the replay is
# measured from when that is done.
my $caught_up = 0;
for (1 .. 300)
{
	$caught_up = $pg->safe_psql('postgres', "SELECT horizon >= $ROWS FROM pgbus_stream.stats() WHERE stream = 'big'") eq 't';
	last if $caught_up;
	sleep 0.1;
}
ok($caught_up, 'the worker has taken in every committed row');

sub status_kb
{
	my %v;
	open my $fh, '<', "/proc/$worker/status" or return {};
	while (<$fh>) { $v{$1} = $2 if /^(VmRSS|VmHWM|RssAnon|RssShmem):\s+(\d+) kB/ }
	close $fh;
	return \%v;
}

# The peak from here on: clear_refs 5 resets VmHWM to the current RSS (the
# server runs as the test's user). Without it the peak since start counts,
# which is larger, never smaller.
my $cr;
my $reset = open($cr, '>', "/proc/$worker/clear_refs") && print($cr "5\n") && close($cr);
my $before = status_kb();
note(sprintf('worker before: VmRSS %d kB, VmHWM %d kB (peak %s), RssAnon %d kB, RssShmem %d kB',
		@$before{qw(VmRSS VmHWM)}, $reset ? 'reset' : 'since start', @$before{qw(RssAnon RssShmem)}));

my $t0 = time;
my $c = $pg->sse('/streams/big?replay=100000000', timeout => 30);
is($c->status, 200, '?replay=100000000: 200');
ok($c->wait_for_data_events(100, 30), 'the first rows arrive');
my $first_s = time - $t0;
my $early = $c->event_count;
cmp_ok($early, '<', $ROWS / 2, "answered while most rows are still to come ($early frames so far)");
note(sprintf('first 100 rows after %.2f s', $first_s));

# Read everything, checking order as it comes; frames are dropped once
# checked so the client's memory stays small.
my ($next, $bad, $last_horizon, $peak_anon) = (1, undef, -1, 0);
my $deadline = time + 300;
while ($next <= $ROWS && time < $deadline && !$c->closed)
{
	$c->poll(0.2);
	for my $f ($c->take_events)
	{
		next unless defined $f->{id};
		my ($n) = ($f->{data} // '') =~ /^row (\d+) /;
		my $p = parse_token($f->{id});
		if (!defined $n || $n != $next)
		{
			$bad //= "frame for row $next carried: " . substr($f->{data} // 'undef', 0, 40);
		}
		elsif (!$p || $p->{horizon} < $last_horizon)
		{
			$bad //= "row $n: id $f->{id} goes back";
		}
		$last_horizon = $p->{horizon} if $p;
		$next++;
	}
	$c->forget_taken;
	my $s = status_kb();
	$peak_anon = $s->{RssAnon} if ($s->{RssAnon} // 0) > $peak_anon;
}
my $took = time - $t0;
is($next - 1, $ROWS, "every row arrived ($ROWS in ${\ sprintf('%.1f', $took)} s)");
ok(!defined $bad, 'in order, none twice, ids never go back') or diag($bad);
$c->close;

my $after = status_kb();
my $growth = $after->{VmHWM} - $before->{VmRSS};
note(sprintf('worker after: VmRSS %d kB, VmHWM %d kB, RssAnon %d kB (peak sampled %d kB), RssShmem %d kB',
		@$after{qw(VmRSS VmHWM RssAnon)}, $peak_anon, $after->{RssShmem}));
cmp_ok($growth, '<', $BOUND_KB,
	sprintf('worker peak memory rose by %.1f MB serving the replay (bound: 64 MB)', $growth / 1024));

$pg->finish;
done_testing();
