# 023_history: with pgbus_stream.stats_enabled the workers write one
# stream_stats row per broadcast (with its fan-out), connect and disconnect,
# in batches; without it, nothing; old rows are pruned by age.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode;

my $deadline;

my $pg = PgbusNode->new('history', conf => "pgbus_stream.cursor_flush_interval = 100\npgbus_stream.retention_interval = 1\n");
$pg->create_stream('hist');
$pg->create_stream('probe');

sub rows { return $pg->safe_psql('postgres', q{SELECT count(*) FROM pgbus_stream.stream_stats WHERE stream_name = 'hist'}) }

my $c = $pg->open_stream('hist');
$pg->broadcast('hist', 'before');
ok($c->wait_for_data_events(1, 10), 'off: delivered');
$c->close;
sleep 0.5;
is(rows(), 0, 'stats_enabled off: no history rows');

$pg->safe_psql('postgres', q{ALTER SYSTEM SET pgbus_stream.stats_enabled = on; SELECT pg_reload_conf();});
# The worker applies the reload at its next wake-up, which on a slow (assert)
# build can come after a fixed sleep: wait until a connection to another
# stream is recorded, so that both connections below are.
$deadline = time + 20;
my $applied = 0;
until ($applied || time > $deadline)
{
	my $p = $pg->open_stream('probe');
	$p->close;
	sleep 0.3;
	$applied = $pg->safe_psql('postgres',
		q{SELECT count(*) FROM pgbus_stream.stream_stats WHERE stream_name = 'probe' AND event_type = 'connect'}) > 0;
}
ok($applied, 'on: the worker applied the reload');
my @c = map { $pg->open_stream('hist') } 1 .. 2;
$pg->broadcast('hist', "m$_") for 1 .. 3;
ok($_->wait_for_data_events(3, 10), 'on: delivered') for @c;
$_->close for @c;
$deadline = time + 10;
my $got = '';
while (time < $deadline)
{
	$got = $pg->safe_psql('postgres',
		q{SELECT event_type || ':' || count(*) || ':' || coalesce(max(fanout), 0) FROM pgbus_stream.stream_stats
		  WHERE stream_name = 'hist' GROUP BY event_type ORDER BY event_type});
	last if $got =~ /disconnect:2/;
	sleep 0.2;
}
is($got, "broadcast:3:2\nconnect:2:0\ndisconnect:2:0", 'one row per broadcast (fan-out 2), connect and disconnect');
is($pg->safe_psql('postgres', q{SELECT bool_and(duration_ms >= 0) FROM pgbus_stream.stream_stats WHERE stream_name = 'hist'}), 't',
	'durations recorded');

$pg->safe_psql('postgres', q{UPDATE pgbus_stream.stream_stats SET created_at = now() - interval '30 days' WHERE event_type = 'connect' AND stream_name = 'hist'});
$deadline = time + 10;
sleep 0.2 while rows() > 5 && time < $deadline;
is(rows(), 5, 'rows older than stats_max_age are pruned');

$pg->finish;
done_testing();
