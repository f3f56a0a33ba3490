# 010_producer: a producer never blocks on or fails because of a client, a
# full ring or a dead worker. The same producer (300 single-row commits,
# timed one by one inside the server) runs
#   - with no subscriber (the worker has nothing to do with it): the baseline,
#   - with a subscriber that reads,
#   - while the worker is stopped (SIGSTOP) and the 64 kB ring laps it,
#   - while 10 subscribers stop reading (queues and sockets full),
#   - while another producer floods a stream that 5 subscribers read.
# Each run must finish, every commit must succeed, and its mean commit
# latency stays within a generous bound of the baseline (10x + 10 ms; one
# commit never over 2 s): a producer that waited for the worker or a client
# would blow through it (stopped or stalled: it would never finish). This is
# no speed target: the figures are printed, not judged, beyond that bound.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new(
	'producer', conf => q{
pgbus_stream.ring_size = 64
pgbus_stream.queue_max_bytes = '256kB'
});
$pg->create_stream('lat');
$pg->create_stream('flood');
$pg->safe_psql('postgres', q{
CREATE PROCEDURE timed_commits(n int, payload text, INOUT mean_ms float8 DEFAULT 0,
                               INOUT worst_ms float8 DEFAULT 0, INOUT committed int DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; d float8; total float8 := 0;
BEGIN
  FOR i IN 1 .. n LOOP
    t0 := clock_timestamp();
    PERFORM pgbus_stream.broadcast('lat', payload);
    COMMIT;
    d := extract(epoch FROM clock_timestamp() - t0) * 1000;
    total := total + d;
    worst_ms := greatest(worst_ms, d);
    committed := committed + 1;
  END LOOP;
  mean_ms := total / n;
END $$;
});

# run_producer returns (mean_ms, worst_ms) of 300 timed commits; $reader,
# when given, is a client that keeps reading meanwhile.
sub run_producer
{
	my ($label, $reader) = @_;
	my ($out, $err) = ('', '');
	my $ok = eval {
		my $h = IPC::Run::start(
			[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $pg->connstr('postgres'),
			  '-c', q{CALL timed_commits(300, repeat('x', 2000))} ],
			'>', \$out, '2>', \$err, IPC::Run::timeout(60));
		while ($h->pumpable)
		{
			$reader ? $reader->poll(0.01) : sleep(0.01);
			$h->pump_nb;
		}
		$h->finish;
	};
	ok($ok, "$label: the producer finished") or diag($@ || $err);
	my ($mean, $worst, $n) = split /\|/, ($out =~ s/\s+$//r);
	is($n, 300, "$label: every commit succeeded");
	note(sprintf('%s: mean %.3f ms, worst %.3f ms per commit', $label, $mean // -1, $worst // -1));
	return ($mean // 1e9, $worst // 1e9);
}

sub within_bound
{
	my ($label, $base, $mean, $worst) = @_;
	cmp_ok($mean, '<=', 10 * $base + 10, sprintf('%s: mean %.3f ms within 10 x %.3f ms + 10 ms', $label, $mean, $base));
	cmp_ok($worst, '<=', 2000, sprintf('%s: worst commit %.1f ms under 2 s', $label, $worst));
}

my ($base) = run_producer('baseline, no subscriber');

{
	my $c = $pg->open_stream('lat');
	within_bound('a reading subscriber', $base, run_producer('a reading subscriber', $c));
	ok($c->wait_for_data_events(300, 20), 'the reading subscriber got all 300');
	$c->close;
}

{
	my $c = $pg->open_stream('lat');
	my ($wpid) = $pg->worker_pids;
	my $overflows = $pg->safe_psql('postgres', 'SELECT sum(ring_overflows) FROM pgbus_stream.workers()');
	my $catch_ups = $pg->safe_psql('postgres', 'SELECT sum(catch_ups) FROM pgbus_stream.workers()');
	kill 'STOP', $wpid;
	my @r = eval { run_producer('worker stopped') };
	kill 'CONT', $wpid;
	die $@ if $@;
	within_bound('worker stopped', $base, @r);
	ok($c->wait_for_data_events(300, 30), 'after SIGCONT the subscriber gets all 300 (from the table)');
	my $lapped = $pg->safe_psql('postgres', 'SELECT sum(catch_ups) FROM pgbus_stream.workers()');
	cmp_ok($lapped, '>', $catch_ups, 'the worker was lapped and caught up from the table');
	$c->close;
}

{
	my @stalled = map { $pg->open_stream('lat') } 1 .. 10;    # never read again
	# 8 MB each: more than their sockets and queues hold, so they lag (the
	# default overflow_policy): each waits, shown as replaying in connections().
	$pg->safe_psql('postgres', q{SELECT count(pgbus_stream.broadcast('lat', repeat('s', 100000))) FROM generate_series(1, 80)});
	my $waiting = 0;
	my $deadline = time + 20;
	while (time < $deadline && $waiting < 10)
	{
		$waiting = $pg->safe_psql('postgres', q{SELECT count(*) FROM pgbus_stream.connections() WHERE streams = 'lat' AND state = 'replaying'});
		sleep 0.2;
	}
	ok($waiting >= 10, "the 10 subscribers are stalled: their connections wait ($waiting lagging)");
	within_bound('10 stalled subscribers', $base, run_producer('10 stalled subscribers'));
	$_->close for @stalled;
}

{
	my @readers = map { $pg->open_stream('flood') } 1 .. 5;
	# Commits of their own, one after the other, fanned out to 5 readers,
	# until the producer's run is over (a row in flood_stop) or 200,000 of
	# them: the flood must outlast the run it is measured against.
	$pg->safe_psql('postgres', q{
CREATE TABLE flood_stop ();
CREATE PROCEDURE flood(n int) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. n LOOP
    PERFORM pgbus_stream.broadcast('flood', repeat('f', 500));
    COMMIT;
    EXIT WHEN EXISTS (SELECT FROM flood_stop);
  END LOOP;
END $$;
});
	my ($out, $err) = ('', '');
	my $flood = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $pg->connstr('postgres'), '-c', 'CALL flood(200000)' ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(120));
	my $deadline = time + 10;
	sleep 0.1 while time < $deadline
	  && $pg->safe_psql('postgres', q{SELECT emitted FROM pgbus_stream.stats() WHERE stream = 'flood'}) < 500;
	within_bound('a flood on another stream', $base, run_producer('a flood on another stream'));
	my $emitted = $pg->safe_psql('postgres', q{SELECT emitted FROM pgbus_stream.stats() WHERE stream = 'flood'});
	$pg->safe_psql('postgres', 'INSERT INTO flood_stop DEFAULT VALUES');
	ok($emitted >= 500 && $emitted < 200000, "the flood was still going when the producer was done ($emitted of at most 200,000)");
	ok(eval { $flood->finish }, 'the flood stopped when told') or diag($@ || $err);
	$_->poll(0.1) for @readers;
	$_->close for @readers;
}

$pg->finish;
done_testing();
