# 004_pgmq_layout: existing PGMQ-style queues, attached as they are.
#
# No PGMQ extension here: the test makes tables with PGMQ's layout in a
# schema named pgmq (q_<queue> and a_<queue>), attaches them, and writes
# into them the way other producers do: INSERT (one and several rows),
# INSERT ... SELECT, COPY, a send-like function, a rollback. Envelope
# payloads ({"html", "event"}) and any other JSON (sent as its text) arrive;
# archived rows are still replayed; detach stops the stream.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();
use PgbusNode qw(frames_ok sql_literal);

my $pg = PgbusNode->new('pgmq');

$pg->safe_psql('postgres', q{
CREATE SCHEMA pgmq;
-- current PGMQ layout
CREATE TABLE pgmq.q_pgbus_orders (
    msg_id       bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
    read_ct      integer DEFAULT 0 NOT NULL,
    enqueued_at  timestamptz DEFAULT now() NOT NULL,
    last_read_at timestamptz,
    vt           timestamptz NOT NULL,
    message      jsonb,
    headers      jsonb
);
CREATE TABLE pgmq.a_pgbus_orders (
    msg_id       bigint PRIMARY KEY,
    read_ct      integer DEFAULT 0 NOT NULL,
    enqueued_at  timestamptz DEFAULT now() NOT NULL,
    last_read_at timestamptz,
    archived_at  timestamptz DEFAULT now() NOT NULL,
    vt           timestamptz NOT NULL,
    message      jsonb,
    headers      jsonb
);
-- older PGMQ layout (no headers, no last_read_at), no archive table
CREATE TABLE pgmq.q_pgbus_legacy (
    msg_id       bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
    read_ct      integer DEFAULT 0 NOT NULL,
    enqueued_at  timestamptz DEFAULT now() NOT NULL,
    vt           timestamptz NOT NULL,
    message      jsonb
);
-- a producer function shaped like pgmq.send(queue, message, delay)
CREATE FUNCTION public.send(queue text, msg jsonb, delay integer DEFAULT 0)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE id bigint;
BEGIN
  EXECUTE format('INSERT INTO pgmq.%I (vt, message) VALUES (now() + make_interval(secs => $2), $1) RETURNING msg_id',
                 'q_' || queue) USING msg, delay INTO id;
  RETURN id;
END $$;
});

my $row = $pg->safe_psql('postgres',
	q{SELECT name, queue_name, queue_schema, queue_table, archive_table, kind FROM pgbus_stream.attach('pgbus_orders', public => true)});
is($row, 'orders|pgbus_orders|pgmq|q_pgbus_orders|a_pgbus_orders|pgmq',
	'attach(pgbus_orders): stream "orders" on pgmq.q_pgbus_orders');
$row = $pg->safe_psql('postgres',
	q{SELECT name, queue_schema, queue_table, coalesce(archive_table, '-'), kind FROM pgbus_stream.attach('pgbus_legacy', public => true)});
like($row, qr/^legacy\|pgmq\|q_pgbus_legacy\|/, 'attach(pgbus_legacy): older layout accepted');
ok(defined $pg->wait_stream_served('orders'), 'orders is served');
ok(defined $pg->wait_stream_served('legacy'), 'legacy is served');

my $c = $pg->open_stream('orders');
is($c->status, 200, 'subscribed to orders');
my ($W) = $c->body =~ /since_id=(\S+)/;
my $l = $pg->open_stream('legacy');
is($l->status, 200, 'subscribed to legacy');

# Every way of writing rows.
$pg->safe_psql('postgres', q{
INSERT INTO pgmq.q_pgbus_orders (vt, message) VALUES (now(), '{"html": "<p>order 1</p>"}');
INSERT INTO pgmq.q_pgbus_orders (vt, message, headers) VALUES
  (now(), '{"html": "<p>order 2</p>", "event": "order:new"}', '{"x-trace": "abc"}'),
  (now(), '{"html": "<p>order 3</p>\nsecond line"}', NULL),
  (now(), '{"id": 4, "total": 12.5, "items": ["a", "b"]}', NULL);
INSERT INTO pgmq.q_pgbus_orders (vt, message) VALUES (now(), '"a JSON string"');
BEGIN;
INSERT INTO pgmq.q_pgbus_orders (vt, message) VALUES (now(), '{"html": "rolled back"}');
ROLLBACK;
INSERT INTO pgmq.q_pgbus_orders (vt, message)
  SELECT now(), jsonb_build_object('html', 'bulk ' || i) FROM generate_series(1, 30) i;
COPY pgmq.q_pgbus_orders (vt, message) FROM STDIN;
2000-01-01 00:00:00+00	{"html": "copied 1"}
2000-01-01 00:00:00+00	{"html": "copied 2", "event": "order:copied"}
2000-01-01 00:00:00+00	[1, 2, 3]
\.
SELECT public.send('pgbus_orders', '{"html": "sent"}');
SELECT public.send('pgbus_orders', '{"html": "sent with delay"}', 60);
INSERT INTO pgmq.q_pgbus_legacy (vt, message) VALUES (now(), '{"html": "legacy 1"}'), (now(), '{"v": 2}');
});

# What should arrive: every row, as the worker renders it (envelope html,
# else the JSON text), with the envelope's event name.
my $rows = $pg->safe_psql('postgres', q{
SELECT msg_id,
       coalesce(CASE WHEN jsonb_typeof(message) = 'object' THEN message->>'event' END, 'turbo-stream'),
       CASE WHEN jsonb_typeof(message) = 'object' AND message ? 'html' THEN message->>'html'
            ELSE message::text END
FROM pgmq.q_pgbus_orders ORDER BY msg_id});
my @want = map { my ($id, $ev, $d) = split /\|/, $_, 3; [ $id, $d, $ev ] }
  split /\n(?=\d+\|)/, $rows;
is(scalar @want, 40, '40 rows committed into pgmq.q_pgbus_orders');

ok($c->wait_for_data_events(scalar @want, 15), 'every committed row arrives');
$c->poll(0.5);
frames_ok([ $c->data_events ], \@want, $W, 'orders, live');
ok(!grep({ $_->{data} eq 'rolled back' } $c->data_events), 'the rolled-back insert never arrives');
my ($json) = grep { $_->{data} =~ /total/ } $c->data_events;
is($json && $json->{data}, '{"id": 4, "items": ["a", "b"], "total": 12.5}',
	'non-envelope JSON is sent as its text');

ok($l->wait_for_data_events(2, 10), 'legacy: rows arrive');
$l->poll(0.5);
is_deeply([ map { $_->{data} } $l->data_events ], [ 'legacy 1', '{"v": 2}' ], 'legacy: exact data');
ok(!grep({ $_->{data} =~ /order|bulk|copied/ } $l->data_events), 'streams do not leak into each other');

# Archive some rows the way pgmq.archive does; replay still has them.
$pg->safe_psql('postgres', q{
WITH moved AS (
  DELETE FROM pgmq.q_pgbus_orders WHERE msg_id IN (SELECT msg_id FROM pgmq.q_pgbus_orders ORDER BY msg_id LIMIT 5)
  RETURNING *)
INSERT INTO pgmq.a_pgbus_orders (msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers)
  SELECT msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers FROM moved;
});
is($pg->safe_psql('postgres', 'SELECT count(*) FROM pgmq.a_pgbus_orders'), '5', 'five rows archived');
my $r = $pg->open_stream('orders', query => "since=$W");
ok($r->wait_for_data_events(scalar @want, 15), 'replay from the start');
$r->poll(0.5);
frames_ok([ $r->data_events ], \@want, $W, 'orders, replay (queue + archive)');
$r->close;

# detach: the stream goes away, the queue stays, inserts are not captured.
$pg->safe_psql('postgres', q{SELECT pgbus_stream.detach('orders')});
is($pg->safe_psql('postgres',
	q{SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pgmq.q_pgbus_orders'::regclass AND NOT tgisinternal}),
	'0', 'detach removes the triggers');
my $gone = 0;
for (1 .. 50)
{
	my $x = $pg->sse('/streams/orders');
	my $st = $x->status;
	$x->close;
	if ($st == 401) { $gone = 1; last }    # unknown without a credential: like a private stream
	Time::HiRes::sleep(0.1);
}
ok($gone, 'detached stream: 401');
$pg->safe_psql('postgres',
	q{INSERT INTO pgmq.q_pgbus_orders (vt, message) VALUES (now(), '{"html": "after detach"}')});
$c->poll(1);
ok(!grep({ $_->{data} eq 'after detach' } $c->data_events), 'no event after detach');
is($pg->safe_psql('postgres', 'SELECT count(*) FROM pgmq.q_pgbus_orders'), '36', 'the queue itself is untouched');
$c->close;
$l->close;

$pg->finish;
done_testing();
