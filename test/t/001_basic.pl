# 001_basic: one node, one stream, real sockets. Exact response head and
# preamble, exact frames for committed broadcasts (multi-line payloads and a
# frame-injection attempt), custom event names, transactional delivery
# (rollback, savepoint rollback), heartbeats, and the error statuses.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();
use PgbusNode qw(parse_token token_covers token_le);

my $pg = PgbusNode->new('main');
my $epoch = $pg->create_stream('chat');
like($epoch, qr/^\d+$/, 'create_stream returns the stream row');

# ---- response head and preamble ----
my $c = $pg->sse('/streams/chat');
is($c->status, 200, 'GET /streams/chat: 200');
is($c->header('content-type'), 'text/event-stream', 'content-type');
is($c->header('cache-control'), 'no-cache, no-transform', 'cache-control');
is($c->header('x-accel-buffering'), 'no', 'x-accel-buffering');
is($c->header('access-control-allow-origin'), undef, 'no CORS header unless configured');

ok($c->wait_for_events(1, 10), 'preamble arrives');
my $preamble_re = qr/\Aretry: (\d+)\n: pgbus stream open since_id=([A-Za-z0-9._~:,-]+) stream=chat\nevent: pgbus:connected\ndata: \{"connectionId":"([0-9a-f]{16})"\}\n\nid: ([A-Za-z0-9._~:,-]+)\n\n/;
like($c->body, $preamble_re, 'exact preamble: retry, open comment, pgbus:connected, the starting id')
  or diag('body: ' . PgbusNode::sql_literal($c->body));
my ($retry0, $since0, $conn_id, $start_id) = $c->body =~ $preamble_re;
ok(defined $retry0 && $retry0 >= 1000 && $retry0 <= 3000, "retry is between 1 and 3 s ($retry0)");
ok(defined $since0 && parse_token($since0), "preamble since_id is a cursor token ($since0)");
is($start_id, $since0, 'the id frame carries the starting cursor');
is($c->last_event_id, $since0, 'which an EventSource takes as its last event id');
my ($first) = $c->events;
is($first->{event}, 'pgbus:connected', 'first frame is pgbus:connected');
is($first->{id}, undef, 'pgbus:connected carries no id');

# A second subscriber: every frame must reach it too, byte for byte.
my $c2 = $pg->sse('/streams/chat');
is($c2->status, 200, 'second subscriber: 200');
ok($c2->wait_for_events(1, 10), 'second subscriber: preamble');
my (undef, undef, $conn_id2) = $c2->body =~ $preamble_re;
isnt($conn_id2, $conn_id, 'each connection has its own connectionId');

# ---- committed broadcasts ----
my @sent;    # [msg_id, data, event]

sub send_msg
{
	my ($data, $event) = @_;
	my $id = $pg->broadcast('chat', $data, $event);
	like($id, qr/^\d+$/, "broadcast returns a msg_id ($id)");
	push @sent, [ $id, $data, $event // 'turbo-stream' ];
	return $id;
}

my $turbo = '<turbo-stream action="append" target="messages"><template><p>hello</p></template></turbo-stream>';
my $multi = "line one\r\nline two\nline three\rline four\r\n";
my $inject = "safe\n\nid: 999\nevent: evil\ndata: x";
send_msg($turbo);
send_msg($multi);
send_msg($inject);

ok($c->wait_for_data_events(3, 10), 'three committed broadcasts arrive');
my @d = $c->data_events;
is(scalar @d, 3, 'exactly three frames');

is_deeply($d[0]{data_lines}, [$turbo], 'frame 1: one data line');
is_deeply(
	$d[1]{data_lines},
	[ 'line one', 'line two', 'line three', 'line four', '' ],
	'frame 2: CRLF, LF and CR each end a data line (a trailing newline is kept)');
is_deeply(
	$d[2]{data_lines},
	[ 'safe', '', 'id: 999', 'event: evil', 'data: x' ],
	'frame 3: injected lines stay data lines');
for my $i (0 .. 2)
{
	is($d[$i]{event}, 'turbo-stream', "frame @{[$i+1]}: event turbo-stream");
	is(scalar @{ $d[$i]{all_id} // [] }, 1, "frame @{[$i+1]}: one id field");
	is(scalar @{ $d[$i]{all_event} // [] }, 1, "frame @{[$i+1]}: one event field");
	is($d[$i]{unknown}, undef, "frame @{[$i+1]}: no other field");
}
is($d[2]{raw},
	"id: $d[2]{id}\nevent: turbo-stream\ndata: safe\ndata: \ndata: id: 999\ndata: event: evil\ndata: data: x\n\n",
	'frame 3: exact bytes');
is($d[1]{raw},
	"id: $d[1]{id}\nevent: turbo-stream\ndata: line one\ndata: line two\ndata: line three\ndata: line four\ndata: \n\n",
	'frame 2: exact bytes');
ok(!grep({ ($_->{event} // '') eq 'evil' || ($_->{id} // '') eq '999' } $c->events),
	'no injected frame');

# ---- custom event name ----
send_msg('<turbo-stream action="remove" target="m1"></turbo-stream>', 'custom:event');
ok($c->wait_for_data_events(4, 10), 'custom event arrives');
@d = $c->data_events;
is($d[3]{event}, 'custom:event', 'custom event name');

# ---- transactions ----
my $rb = $pg->safe_psql('postgres', q{
BEGIN;
SELECT pgbus_stream.broadcast('chat', 'rolled back');
ROLLBACK;
});
like($rb, qr/^\d+$/, "rolled-back broadcast took msg_id $rb");
$pg->safe_psql('postgres', q{
BEGIN;
SAVEPOINT s1;
SELECT pgbus_stream.broadcast('chat', 'savepoint rolled back');
ROLLBACK TO SAVEPOINT s1;
SELECT pgbus_stream.broadcast('chat', 'kept after savepoint');
COMMIT;
});
my $kept_id = $pg->safe_psql('postgres',
	q{SELECT msg_id FROM pgbus_stream.q_pgbus_chat WHERE message->>'html' = 'kept after savepoint'});
push @sent, [ $kept_id, 'kept after savepoint', 'turbo-stream' ];
# commit / rollback / commit
send_msg('commit A');
$pg->safe_psql('postgres', q{BEGIN; SELECT pgbus_stream.broadcast('chat', 'rollback B'); ROLLBACK;});
send_msg('commit C');

ok($c->wait_for_data_events(7, 10), 'committed broadcasts after the rollbacks arrive');
$c->poll(1);    # anything that should not be there gets a chance to show
@d = $c->data_events;
is_deeply([ map { $_->{data} } @d ], [ map { $_->[1] =~ s/\r\n|\r|\n/\n/gr } @sent ],
	'exactly the committed broadcasts, in commit order');
ok(!grep({ ($_->{data} // '') =~ /rolled back|rollback B/ } @d), 'rolled-back broadcasts never arrive');
is_deeply([ map { $_->{event} } @d ], [ map { $_->[2] } @sent ], 'event names');

# Ids: opaque tokens that only grow; each one covers its own msg_id, which
# the previous token did not.
my $prev = $since0;
for my $i (0 .. $#d)
{
	my $tok = $d[$i]{id};
	ok(parse_token($tok), "frame $i: id '$tok' is a cursor token");
	ok($tok ne $prev && token_le($prev, $tok), "frame $i: id grows ($prev -> $tok)");
	ok(token_covers($tok, $sent[$i][0]), "frame $i: id covers msg_id $sent[$i][0]");
	ok(!token_covers($prev, $sent[$i][0]), "frame $i: previous id did not cover msg_id $sent[$i][0]");
	is(parse_token($tok)->{epoch}, parse_token($since0)->{epoch}, "frame $i: same epoch as since_id");
	$prev = $tok;
}

# The second subscriber got the same frames, byte for byte.
ok($c2->wait_for_data_events(scalar @d, 10), 'second subscriber gets every frame');
is_deeply([ map { $_->{raw} } $c2->data_events ], [ map { $_->{raw} } @d ],
	'second subscriber: identical frames');

# ---- heartbeat (heartbeat_interval = 1 s in the tests) ----
my $hb = $c->wait_for_comment(qr/^heartbeat \d+$/, 5);
ok(defined $hb, 'heartbeat comment arrives');
if (defined $hb)
{
	my ($t) = $hb =~ /(\d+)/;
	ok(abs($t - time) < 60, "heartbeat carries the epoch seconds ($t)");
}
ok(!$c->closed, 'stream still open');
$c->close;
$c2->close;

# ---- errors ----
sub status_of
{
	my ($path, %opt) = @_;
	my $r = $pg->sse($path, %opt);
	my $st = $r->status;
	$r->wait_closed(2);
	isnt($r->header('content-type') // '', 'text/event-stream', "$path: not an event stream")
	  if $st != 200;
	$r->close;
	return $st;
}

is(status_of('/streams/nope'), 401, 'unknown stream: 401 (as a private one)');
is(status_of('/other/path'), 404, 'other path: 404');
is(status_of('/streams/'), 404, 'no stream name: 404');
is(status_of('/streams/chat', method => 'POST'), 405, 'POST: 405');
{
	my $r = $pg->sse('/streams/chat', method => 'POST');
	is($r->header('allow'), 'GET, OPTIONS', '405 names the allowed methods');
	$r->close;
}
is(status_of('/streams/chat', method => 'POST', body => 'x'), 405, 'POST with a body: 405');
is(status_of('/streams/chat', method => 'DELETE'), 405, 'DELETE: 405');
is(status_of('/streams/chat?since=abc'), 400, 'bad ?since: 400');
{
	my $r = $pg->sse('/streams/chat?since=abc');
	$r->wait_closed(2);
	like($r->body, qr/\S/, '400 names the reason: ' . ($r->body =~ s/\s+$//r));
	$r->close;
}
is(status_of('/streams/chat?since=-1'), 400, 'negative ?since: 400');
is(status_of('/streams/chat?since=1.5'), 400, 'float ?since: 400');
is(status_of('/streams/chat?since=99999999999999999999'), 400, 'overflowing ?since: 400');
is(status_of('/streams/chat', headers => { 'Last-Event-ID' => 'x~y' }), 400,
	'bad Last-Event-ID: 400');
is(status_of('/streams/chat?since=' . $prev), 200, 'the last id is a valid ?since');

# The listener survived all of it, and answers a lone connection at once
# (no other connection open, so no heartbeat timer wakes the worker).
for my $i (1 .. 5)
{
	my $t0 = Time::HiRes::time();
	my $c3 = eval { $pg->sse('/streams/chat', timeout => 5) };
	my $dt = Time::HiRes::time() - $t0;
	ok($c3 && $c3->status == 200 && $dt < 2,
		sprintf('lone connection %d answered in %.3f s', $i, $dt))
	  or diag($@ || 'status ' . ($c3 ? $c3->status : 'none'));
	$c3->close if $c3;
	Time::HiRes::sleep(0.3);
}

$pg->finish;
done_testing();
