# 009_promises: README promises that no other test would catch if they broke.
#
# A. ?replay=all and ?replay=N: the whole backlog, its last N (N larger than
#    the backlog: all of it), 0: none; then live frames; a bad N is a 400.
# B. A durable subscriber's stored cursor never passes what was written to
#    its socket: while it stops reading, the cursor stays below the frames
#    still queued in the worker; once it reads them, the cursor covers all.
# C. A committed row gone before the worker could read it (deleted while the
#    worker was stopped) counts in stats().failed and alerts(), and delivery
#    goes on.
# D. Retention on a PGMQ queue moves the rows to its archive table.
# E. A transaction with more events than max_pending_events: the workers read
#    it from the table; every message arrives once, in order.
# F. /healthz says 503 when the worker cannot read its catalog (extension
#    dropped), and 200 again once it can.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(frames_ok parse_token token_covers);

my $pg = PgbusNode->new(
	'promises', conf => q{
pgbus_stream.retention_interval = 1
pgbus_stream.cursor_flush_interval = 100
pgbus_stream.inline_payload_max = 1024
pgbus_stream.queue_max_events = 10000
pgbus_stream.queue_max_bytes = '16MB'
});

sub q1 { return $pg->safe_psql('postgres', $_[0]) }

# wait_for polls $cond for up to $secs seconds; returns its last value.
sub wait_for
{
	my ($cond, $secs) = @_;
	my $deadline = time + $secs;
	my $v;
	while (!($v = $cond->()) && time < $deadline) { sleep 0.1 }
	return $v;
}

# ---------------------------------------------------------------- A. replay
$pg->create_stream('rp');
my @rp = map { [ $pg->broadcast('rp', "r$_"), "r$_" ] } 1 .. 5;
my $c = $pg->open_stream('rp', query => 'replay=all');
is($c->status, 200, 'replay=all: 200');
ok($c->wait_for_data_events(5, 10), 'replay=all: the backlog arrives');
push @rp, [ $pg->broadcast('rp', 'r6'), 'r6' ];
ok($c->wait_for_data_events(6, 10), 'replay=all: then a live frame');
$c->poll(0.3);
frames_ok([ $c->data_events ], \@rp, undef, 'replay=all');
$c->close;

for my $case ([ 2, [ @rp[ 4, 5 ] ] ], [ 100, \@rp ], [ 0, [] ])
{
	my ($n, $want) = @$case;
	$c = $pg->open_stream('rp', query => "replay=$n");
	is($c->status, 200, "replay=$n: 200");
	$c->wait_for_data_events(scalar @$want, 10);
	$c->poll(0.5);
	frames_ok([ $c->data_events ], $want, undef, "replay=$n");
	$c->close;
}
$c = $pg->sse('/streams/rp?replay=lots');
is($c->status, 400, 'replay=lots: 400');
$c->close;

# ---------------------------------------------------------------- B. durable cursor
$pg->create_stream('dur');
$c = $pg->open_stream('dur', query => 'subscriber=alice');
is($c->status, 200, 'durable subscriber connected');
# About 2.7 MB in one transaction: the sockets hold a few hundred kB, the
# worker queues the rest while the client reads nothing.
my ($first, $last) = split /\|/, q1(q{
WITH b AS (SELECT pgbus_stream.broadcast('dur', repeat('d', 900) || i) AS id FROM generate_series(1, 3000) i)
SELECT min(id) || '|' || max(id) FROM b});
my $stuck = wait_for(sub { q1(q{SELECT coalesce(sum(queued_events), 0) FROM pgbus_stream.connections()}) > 100 }, 10);
ok($stuck, 'the worker holds frames the client has not taken');
sleep 0.5;    # several cursor flushes
my $stored = q1(q{SELECT cursor FROM pgbus_stream.subscribers WHERE id = 'alice' AND stream = 'dur'});
ok(parse_token($stored), "a cursor is stored while the client stalls ($stored)");
ok(token_covers($stored, $first), 'it covers what the socket took');
ok(!token_covers($stored, $last), 'it does not cover the frames still queued in the worker');
ok($c->wait_for_data_events(3000, 60), 'the client reads all 3000');
ok(wait_for(sub { token_covers(q1(q{SELECT cursor FROM pgbus_stream.subscribers WHERE id = 'alice'}), $last) }, 10),
	'then the stored cursor covers the last one');
$c->close;

# ---------------------------------------------------------------- C. failed
$pg->create_stream('gone');
$c = $pg->open_stream('gone');
my ($wpid) = $pg->worker_pids;
# Larger than inline_payload_max: the ring carries only the id, the worker
# reads the row; deleted before it could.
kill 'STOP', $wpid;
my $gone_id = eval {
	my $id = q1(q{SELECT pgbus_stream.broadcast('gone', repeat('g', 2000))});
	q1("DELETE FROM pgbus_stream.q_pgbus_gone WHERE msg_id = $id");
	$id;
};
kill 'CONT', $wpid;
die $@ unless defined $gone_id;
my $after = $pg->broadcast('gone', 'after the gone one');
ok($c->wait_for_data_events(1, 10), 'delivery goes on after a row that was gone');
$c->poll(0.3);
is_deeply([ map { $_->{data} } $c->data_events ], ['after the gone one'], 'only the later message arrives');
ok(wait_for(sub { q1(q{SELECT failed FROM pgbus_stream.stats() WHERE stream = 'gone'}) == 1 }, 5),
	'stats(): failed = 1');
is(q1(q{SELECT value FROM pgbus_stream.alerts() WHERE code = 'failed_total'}), 1, 'alerts(): failed_total = 1');
$c->close;

# ---------------------------------------------------------------- D. retention into the PGMQ archive
q1(q{
CREATE SCHEMA pgmq;
CREATE TABLE pgmq.q_pgbus_arch (
    msg_id bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY, read_ct integer DEFAULT 0 NOT NULL,
    enqueued_at timestamptz DEFAULT now() NOT NULL, last_read_at timestamptz,
    vt timestamptz NOT NULL DEFAULT now(), message jsonb, headers jsonb);
CREATE TABLE pgmq.a_pgbus_arch (
    msg_id bigint PRIMARY KEY, read_ct integer DEFAULT 0 NOT NULL,
    enqueued_at timestamptz DEFAULT now() NOT NULL, last_read_at timestamptz,
    archived_at timestamptz DEFAULT now() NOT NULL, vt timestamptz NOT NULL,
    message jsonb, headers jsonb);
});
q1(q{SELECT pgbus_stream.attach('pgbus_arch')});
ok(defined $pg->wait_stream_served('arch', undef, private => 1), 'PGMQ queue attached and served');
my @arch = map { $pg->broadcast('arch', "a$_") } 1 .. 5;
q1(q{SELECT pgbus_stream.set_retention('arch', NULL, 2)});
ok(wait_for(sub { q1('SELECT count(*) FROM pgmq.q_pgbus_arch') == 2 }, 15), 'retention keeps the newest 2 in the queue');
is(q1(q{SELECT string_agg(msg_id::text, ',' ORDER BY msg_id) FROM pgmq.a_pgbus_arch}), join(',', @arch[ 0 .. 2 ]),
	'the 3 oldest were moved to the archive');
is(q1(q{SELECT string_agg(message->>'html', ',' ORDER BY msg_id) FROM pgmq.a_pgbus_arch}), 'a1,a2,a3',
	'with their messages');

# ---------------------------------------------------------------- E. max_pending_events
$pg->create_stream('big');
$c = $pg->open_stream('big');
my $overflows = q1('SELECT sum(ring_overflows) FROM pgbus_stream.workers()');
my @big = map { [ $_, "p$_" ] } 1 .. 50;
my @ids = split /\n/, q1(q{SET pgbus_stream.max_pending_events = 16;
SELECT pgbus_stream.broadcast('big', 'p' || i) FROM generate_series(1, 50) i});
$big[$_][0] = $ids[$_] for 0 .. 49;
ok($c->wait_for_data_events(50, 20), 'a transaction past max_pending_events: all 50 arrive');
$c->poll(0.3);
frames_ok([ $c->data_events ], \@big, undef, 'past max_pending_events');
cmp_ok(q1('SELECT sum(ring_overflows) FROM pgbus_stream.workers()'), '>', $overflows,
	'it went through the table (ring_overflows counted)');
$c->close;

# ---------------------------------------------------------------- F. /healthz
sub healthz
{
	my $h = $pg->sse('/healthz');
	my $st = $h->status;
	$h->wait_closed(2);
	my $body = $h->body;
	$h->close;
	return "$st $body";
}
like(healthz(), qr/^200 ok/, '/healthz: 200 while the catalog can be read');
q1('DROP EXTENSION pgbus_stream CASCADE');
my $h = wait_for(sub { my $r = healthz(); $r =~ /^503/ ? $r : undef }, 15);
like($h // healthz(), qr/^503 database unavailable/, '/healthz: 503 once the catalog is gone');
q1('CREATE EXTENSION pgbus_stream');
ok(wait_for(sub { healthz() =~ /^200 ok/ }, 15), '/healthz: 200 again once it is back');

$pg->finish;
done_testing();
