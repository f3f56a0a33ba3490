# 092_dump_restore: pg_dump of a database using pgbus_stream, restored with
# pg_restore on another server, keeps the extension's tables' contents
# (pg_extension_config_dump): streams with their ids and settings, durable
# subscriber cursors, the stream_stats history and its id sequence, and the
# queues' rows. On the restored server the subscriber and a token resume
# with exactly what they missed, and new streams and history rows get ids
# that do not collide with restored ones.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $conf = "pgbus_stream.cursor_flush_interval = 50\npgbus_stream.stats_enabled = on\n";
my $src = PgbusNode->new('dump_src', conf => $conf);

sub datas { return map { $_->{data} } $_[0]->data_events }
sub last_id { my @d = $_[0]->data_events; return @d ? $d[-1]{id} : undef }

# wait_for waits until $sql on $node returns $want (or 10 s passed) and
# returns what it returned last.
sub wait_for
{
	my ($node, $sql, $want) = @_;
	my $deadline = time + 10;
	my $got = '';
	while (time < $deadline)
	{
		$got = $node->safe_psql('postgres', $sql);
		return $got if $got eq $want;
		sleep 0.05;
	}
	return $got;
}

$src->create_stream('chat');
$src->create_stream('quiet');
$src->safe_psql('postgres', q{
SELECT pgbus_stream.set_retention('chat', '30 days', 500);
UPDATE pgbus_stream.streams SET public = false WHERE name = 'quiet';
});
my $alice = $src->open_stream('chat', query => 'subscriber=alice');
my $reader = $src->open_stream('chat');
$src->broadcast('chat', "m$_") for 1 .. 3;
$src->broadcast('quiet', 'q1');
ok($alice->wait_for_data_events(3, 10), 'source: subscriber gets m1..m3');
ok($reader->wait_for_data_events(3, 10), 'source: reader gets m1..m3');
my $cursor = last_id($alice);
is(wait_for($src, q{SELECT cursor FROM pgbus_stream.subscribers WHERE id = 'alice'}, $cursor),
	$cursor, 'source: subscriber cursor stored');
my $token = last_id($reader);
$alice->close;
$reader->close;
cmp_ok(wait_for($src, q{SELECT count(*) >= 3 FROM pgbus_stream.stream_stats WHERE event_type = 'broadcast'}, 't'),
	'eq', 't', 'source: stream_stats has the broadcasts');
# No more history from here on; the snapshot waits until what the workers
# had collected is written (the count holds still for half a second).
$src->safe_psql('postgres', q{ALTER SYSTEM SET pgbus_stream.stats_enabled = off; SELECT pg_reload_conf()});
my ($count, $deadline) = ('', time + 10);
while (time < $deadline)
{
	my $now = $src->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.stream_stats');
	last if $now eq $count;
	$count = $now;
	sleep 0.5;
}

my %tables = (
	streams => 'SELECT * FROM pgbus_stream.streams ORDER BY id',
	subscribers => 'SELECT * FROM pgbus_stream.subscribers ORDER BY id, stream',
	stream_stats => 'SELECT * FROM pgbus_stream.stream_stats ORDER BY id',
	queue => 'SELECT * FROM pgbus_stream.q_pgbus_chat ORDER BY msg_id',
);
my %before = map { $_ => $src->safe_psql('postgres', $tables{$_}) } keys %tables;
ok($before{$_} ne '', "source: $_ has rows") for sort keys %tables;
my $max_stat = $src->safe_psql('postgres', 'SELECT max(id) FROM pgbus_stream.stream_stats');
my $max_stream = $src->safe_psql('postgres', 'SELECT max(id) FROM pgbus_stream.streams');

my $dump = PostgreSQL::Test::Utils::tempdir() . '/pgbus.dump';
command_ok(
	[ 'pg_dump', '-Fc', '-h', $src->host, '-p', $src->port, '-d', 'postgres', '-f', $dump ],
	'pg_dump -Fc of the database');
$src->finish;

# The restored server writes no history of its own, so its table holds only
# what was restored.
my $dst = PgbusNode->new('dump_dst', conf => "pgbus_stream.cursor_flush_interval = 50\n", extension => 0);
command_ok(
	[ 'pg_restore', '--exit-on-error', '-h', $dst->host, '-p', $dst->port, '-d', 'postgres', $dump ],
	'pg_restore into a new server');
is($dst->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'pgbus_stream'}),
	$dst->safe_psql('postgres', q{SELECT default_version FROM pg_available_extensions WHERE name = 'pgbus_stream'}),
	'restored: the extension is there');
for my $t (sort keys %tables)
{
	is($dst->safe_psql('postgres', $tables{$t}), $before{$t}, "restored: $t has the same rows");
}

# The restored catalog serves: a stored cursor and a token resume exactly.
$dst->broadcast('chat', 'm4');
ok(defined $dst->wait_stream_served('chat'), 'restored: stream served');
$alice = $dst->open_stream('chat', query => 'subscriber=alice');
ok($alice->wait_for_data_events(1, 10), 'restored: subscriber resumes from its stored cursor');
$alice->poll(0.3);
is_deeply([ datas($alice) ], ['m4'], 'restored: subscriber gets exactly what it missed');
$alice->close;
$reader = $dst->open_stream('chat', headers => { 'Last-Event-ID' => $token });
ok($reader->wait_for_data_events(1, 10), 'restored: a token from the source resumes');
$reader->poll(0.3);
is_deeply([ datas($reader) ], ['m4'], 'restored: token gets exactly what was missed');
$reader->close;

# New ids do not collide with restored ones.
my $stat_id = $dst->safe_psql('postgres',
	q{INSERT INTO pgbus_stream.stream_stats (stream_name, event_type) VALUES ('chat', 'connect') RETURNING id});
cmp_ok($stat_id, '>', $max_stat, 'restored: the stream_stats id sequence continues after the restored rows');
my $new_stream = $dst->create_stream('later');
cmp_ok($new_stream, '>', $max_stream, 'restored: a new stream gets a new id');

$dst->finish;
done_testing();
