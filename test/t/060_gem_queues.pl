# 060_gem_queues: the pgbus gem's queues are captured without attach().
#
# A PGMQ-shaped schema (test/lib/pgmq_fixture.sql: pgmq.create/send/
# drop_queue as PGMQ has them) and the gem's naming: queues made before
# CREATE EXTENSION and after it by pgmq.create, logical names with ":", "-"
# and ".", the 47-character limit, a queue dropped and made again, a job
# queue with the same prefix, a queue auto_attach does not match, a queue
# that cannot be hooked (pgmq.create still works), default_retention.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(sql_literal);

my $c;

my $pg = PgbusNode->new('gem', extension => 0, bearer_all => 1, conf => "pgbus_stream.retention_interval = 1\n");
my $fixture = slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql");
$pg->safe_psql('postgres', $fixture);

sub q1 { return $pg->safe_psql('postgres', $_[0]) }

sub send_html
{
	my ($queue, $html) = @_;
	return q1("SELECT pgmq.send(" . sql_literal($queue) . ", jsonb_build_object('html', "
		  . sql_literal($html) . "))");
}

# Receives exactly the given payloads on a fresh connection to $stream.
sub delivered_ok
{
	my ($stream, $queue, $test) = @_;
	my $c = $pg->open_stream($stream);
	is($c->status, 200, "$test: subscribed to /streams/$stream");
	my @sent = map { "$test $_" } 1 .. 3;
	send_html($queue, $_) for @sent;
	$c->wait_for_data_events(scalar @sent, 10);
	$c->poll(0.3);
	is_deeply([ map { $_->{data} } $c->data_events ], \@sent, "$test: every message once, in order");
	$c->close;
}

# Before CREATE EXTENSION: a stream queue and a job queue of the gem, and a
# queue of another application.
q1(q{SELECT pgmq.create('pgbus_ai_chat_3a4f9c21b7d20e18_messages'), pgmq.create('pgbus_default'),
            pgmq.create('billing_events')});
q1('CREATE EXTENSION pgbus_stream');
is(q1(q{SELECT string_agg(name || '=' || queue_table || '/' || archive_table || '/' || auto_attached, ' ' ORDER BY name)
          FROM pgbus_stream.streams}),
	'ai_chat_3a4f9c21b7d20e18_messages=q_pgbus_ai_chat_3a4f9c21b7d20e18_messages/'
	  . 'a_pgbus_ai_chat_3a4f9c21b7d20e18_messages/true default=q_pgbus_default/a_pgbus_default/true',
	'queues that existed at CREATE EXTENSION: the gem\'s two attached, billing_events not');
is(q1(q{SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pgmq.q_billing_events'::regclass}),
	'0', 'no trigger on a queue auto_attach does not match');
my $triggers = q{SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pgmq.q_pgbus_ai_chat_3a4f9c21b7d20e18_messages'::regclass};
is(q1($triggers), '0', 'an auto-attached queue nobody watched has no trigger yet (its producers pay nothing)');
send_html('pgbus_ai_chat_3a4f9c21b7d20e18_messages', 'before anyone watched');

# The gem's names, from one implementation.
is(q1(q{SELECT pgbus_stream.queue_name('ai_chat_3a4f9c21b7d20e18:messages')}),
	'pgbus_ai_chat_3a4f9c21b7d20e18_messages', 'queue_name: record stream key');
is(q1(q{SELECT pgbus_stream.queue_name('Orders.EU-west::42')}), 'pgbus_orders_eu_west_42',
	'queue_name: separators, case');
my $at_limit = 'x' x 41;
is(length(q1("SELECT pgbus_stream.queue_name('$at_limit')")), 47, 'queue_name: 41 characters fit');
my ($rc, $out, $err) = $pg->psql('postgres',
	"SELECT pgmq.create(pgbus_stream.queue_name('${at_limit}y'))");
like($err, qr/would be longer than 47 characters/, 'one character more: a clear error');
is(q1(q{SELECT count(*) FROM pg_class WHERE relname LIKE 'q_pgbus_xxxx%'}), '0',
	'... and nothing was created');

delivered_ok('ai_chat_3a4f9c21b7d20e18_messages', 'pgbus_ai_chat_3a4f9c21b7d20e18_messages',
	'queue made before CREATE EXTENSION');
is(q1($triggers), '1', 'the first subscription put the capture trigger on');
$c = $pg->open_stream('ai_chat_3a4f9c21b7d20e18_messages', query => 'since=0');
$c->wait_for_data_events(4, 10);
is_deeply([ map { $_->{data} } $c->data_events ],
	[ 'before anyone watched', map { "queue made before CREATE EXTENSION $_" } 1 .. 3 ],
	'?since=0 replays the row written before the triggers, then the rest');
$c->close;

# After CREATE EXTENSION: pgmq.create as the gem calls it, on its first broadcast.
my $logical = 'orders.eu-west:42';
q1('SELECT pgmq.create(pgbus_stream.queue_name(' . sql_literal($logical) . '))');
is(q1(q{SELECT name || '/' || queue_name || '/' || archive_table FROM pgbus_stream.streams
          WHERE queue_table = 'q_pgbus_orders_eu_west_42'}),
	'orders_eu_west_42/pgbus_orders_eu_west_42/a_pgbus_orders_eu_west_42',
	'queue made by pgmq.create after CREATE EXTENSION: attached, with its archive');
ok(defined $pg->wait_stream_served('orders_eu_west_42'), 'and served');
delivered_ok('orders_eu_west_42', 'pgbus_orders_eu_west_42', 'queue made after CREATE EXTENSION');

# SQL functions take the logical name too.
$c = $pg->open_stream('orders_eu_west_42');
my $id = q1('SELECT pgbus_stream.broadcast(' . sql_literal($logical) . q{, '<p>by logical name</p>')});
ok($c->wait_for_data_events(1, 10), 'broadcast() by logical name arrives');
is(($c->data_events)[0]{data}, '<p>by logical name</p>', '... with its payload');
is(($c->data_events)[0]{id} =~ /~(\d+)$/ ? $1 : undef, $id, '... and its msg_id');
$c->close;

# A queue the gem already made is adopted by attach() and create_stream()
# keeps working for names nobody made.
is(q1(q{SELECT name || '/' || auto_attached FROM pgbus_stream.attach('pgbus_default', 'jobs')}),
	'jobs/false', 'attach() on an auto-attached queue renames and keeps it');
is(q1(q{SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pgmq.q_pgbus_default'::regclass}),
	'1', '... with one capture trigger');

# A queue that cannot be hooked warns; the application's pgmq.create works.
($rc, $out, $err) = $pg->psql('postgres', q{SELECT pgmq.create('pgbus_room 7')});
is($rc, 0, 'pgmq.create of a queue whose name is no stream name succeeds');
like($err, qr/WARNING:  pgbus_stream: PGMQ queue "pgbus_room 7" not auto-attached/,
	'... with a warning naming the queue');
is(q1(q{SELECT count(*) FROM pgmq.meta WHERE queue_name = 'pgbus_room 7'}), '1', '... and PGMQ has it');

# auto_attach off: queues are left alone until attach_matching().
$pg->append_conf('postgresql.conf', "pgbus_stream.auto_attach = ''\n");
$pg->reload;
q1(q{SELECT pgmq.create('pgbus_later')});
is(q1(q{SELECT count(*) FROM pgbus_stream.streams WHERE queue_name = 'pgbus_later'}), '0',
	'auto_attach empty: pgmq.create hooks nothing');
$pg->append_conf('postgresql.conf', "pgbus_stream.auto_attach = 'pgbus_*_messages, pgbus_lat*'\n");
$pg->reload;
is(q1('SELECT pgbus_stream.attach_matching()'), '1', 'attach_matching() hooks the queue now matched');
q1(q{SELECT pgmq.create('pgbus_notifications'), pgmq.create('pgbus_x_messages')});
is(q1(q{SELECT string_agg(queue_name, ',' ORDER BY queue_name) FROM pgbus_stream.streams
          WHERE queue_name IN ('pgbus_later', 'pgbus_notifications', 'pgbus_x_messages')}),
	'pgbus_later,pgbus_x_messages', 'a glob pattern list selects queues');
($rc, $out, $err) = $pg->psql('postgres', q{ALTER SYSTEM SET pgbus_stream.auto_attach = 'pgbus-%'});
like($err, qr/invalid value for parameter "pgbus_stream.auto_attach"/, 'a bad pattern is refused');

# Dropped: forgotten; made again: a new stream (new epoch), served again.
my $old_id = q1(q{SELECT id FROM pgbus_stream.streams WHERE name = 'orders_eu_west_42'});
q1(q{SELECT pgmq.drop_queue('pgbus_orders_eu_west_42')});
is(q1(q{SELECT count(*) FROM pgbus_stream.streams WHERE name = 'orders_eu_west_42'}), '0',
	'pgmq.drop_queue: the stream is forgotten');
# A credential that covers it now waits for the stream to exist again
# (064_gem_pending): the open comment starts from 0, with no epoch.
my $deadline = time + 10;
my $waits = 0;
while (time < $deadline)
{
	my $x = $pg->sse('/streams/orders_eu_west_42', timeout => 5);
	$x->wait_for_events(1, 5) if $x->status == 200;
	$waits = $x->status == 200 && $x->body =~ /^: pgbus stream open since_id=0 stream=orders_eu_west_42$/m;
	$x->close;
	last if $waits;
	sleep 0.1;
}
ok($waits, '... and no longer served: a subscription waits for it to be made again');
$pg->append_conf('postgresql.conf', "pgbus_stream.auto_attach = 'pgbus_'\n");
$pg->reload;
q1(q{SELECT pgmq.create('pgbus_orders_eu_west_42')});
my $new_id = q1(q{SELECT id FROM pgbus_stream.streams WHERE name = 'orders_eu_west_42'});
cmp_ok($new_id, '>', $old_id, 'made again: a new stream id');
ok(defined $pg->wait_stream_served('orders_eu_west_42'), '... served again');
delivered_ok('orders_eu_west_42', 'pgbus_orders_eu_west_42', 'queue made again');
q1(q{DROP TABLE pgmq.q_pgbus_later, pgmq.a_pgbus_later});
is(q1(q{SELECT count(*) FROM pgbus_stream.streams WHERE queue_name = 'pgbus_later'}), '0',
	'DROP TABLE of a queue: forgotten too');

# default_retention: streams nobody configured lose rows older than it
# (PGMQ queues: moved to the archive); a configured one keeps its own.
q1(q{SELECT pgmq.create('pgbus_old'), pgmq.create('pgbus_kept')});
q1(q{SELECT pgbus_stream.set_retention('kept', NULL)});
for my $q ('pgbus_old', 'pgbus_kept')
{
	q1(qq{INSERT INTO pgmq.q_$q (vt, enqueued_at, message)
	      SELECT now(), now() - interval '2 hours', jsonb_build_object('html', i) FROM generate_series(1, 5) i});
	send_html($q, 'fresh');
}
# More streams under the default than one retention run visits (100):
# every one is reached within a few runs.
q1(q{DO $$ BEGIN
  FOR i IN 1..150 LOOP
    PERFORM pgmq.create('pgbus_r_' || i);
    EXECUTE format('INSERT INTO pgmq.%I (vt, enqueued_at, message) VALUES (now(), now() - interval ''2 hours'', ''{}'')',
                   'q_pgbus_r_' || i);
  END LOOP;
END $$});
sleep 2.5;
is(q1(q{SELECT count(*) FROM pgmq.q_pgbus_old}), '6', 'default_retention 0: nothing removed');
$pg->append_conf('postgresql.conf', "pgbus_stream.default_retention = '1h'\n");
$pg->reload;
$deadline = time + 15;
sleep 0.2 while time < $deadline && q1(q{SELECT count(*) FROM pgmq.q_pgbus_old}) ne '1';
is(q1(q{SELECT count(*) || '/' || (SELECT count(*) FROM pgmq.a_pgbus_old) FROM pgmq.q_pgbus_old}), '1/5',
	'default_retention 1h: the five old rows moved to the archive, the fresh one kept');
is(q1(q{SELECT count(*) FROM pgmq.q_pgbus_kept}), '6', 'a stream with set_retention() keeps its own');
# rows per queue through a session-local function (no libxml needed)
my $left_sql = q{CREATE FUNCTION pg_temp.rows_in(t text) RETURNS bigint LANGUAGE plpgsql AS $f$
                   DECLARE n bigint;
                   BEGIN EXECUTE format('SELECT count(*) FROM pgmq.%I', t) INTO n; RETURN n; END $f$;
                 SELECT count(*) FROM generate_series(1, 150) i
                  WHERE EXISTS (SELECT 1 FROM pgmq.meta WHERE queue_name = 'pgbus_r_' || i)
                    AND pg_temp.rows_in('q_pgbus_r_' || i) > 0};
$deadline = time + 20;
sleep 0.3 while time < $deadline && q1($left_sql) ne '0';
is(q1($left_sql), '0', '150 streams under default_retention: every one trimmed, 100 per run');

# DROP EXTENSION leaves the gem's queues working.
q1('DROP EXTENSION pgbus_stream CASCADE');
is(q1(q{SELECT count(*) FROM pgmq.send('pgbus_old', '{"html": "after drop"}')}), '1',
	'after DROP EXTENSION, pgmq.send works');
q1(q{SELECT pgmq.create('pgbus_after_drop')});
is(q1(q{SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'pgbus_stream%'}), '0',
	'... and no event trigger is left');

$pg->finish;
done_testing();
