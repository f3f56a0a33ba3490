# 007_cursors: what a cursor token promises, case by case — a stream dropped
# and re-created (epoch), several streams on one connection, durable
# subscriber cursors, ephemeral broadcasts replayed from memory and expired,
# ids held back while too many sit above the horizon, and a ring overrun.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode qw(parse_token sql_literal);

my $pg = PgbusNode->new('cursors', conf => "pgbus_stream.memory_retention = 3\npgbus_stream.cursor_flush_interval = 50\n");

sub datas { return map { $_->{data} } grep { ($_->{event} // '') eq 'turbo-stream' } $_[0]->events }
sub gaps { return grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $_[0]->events }
sub last_id { my @d = $_[0]->data_events; return @d ? $d[-1]{id} : undef }

# ---- epoch: a stream dropped and re-created while a client is connected ----
my $e1 = $pg->create_stream('epoch');
my $c = $pg->open_stream('epoch');
$pg->broadcast('epoch', 'old 1');
$pg->broadcast('epoch', 'old 2');
ok($c->wait_for_data_events(2, 10), 'epoch: first incarnation delivered');
my $old = last_id($c);
like($old, qr/^\Q$e1\E~/, "epoch: token carries the stream id ($old)");
$pg->safe_psql('postgres', q{SELECT pgbus_stream.drop_stream('epoch')});
ok($c->wait_closed(10), 'epoch: connections of a dropped stream are closed');
my $e2 = $pg->create_stream('epoch');
isnt($e2, $e1, 'epoch: the re-created stream has a new id');
$pg->broadcast('epoch', 'new 1');
$c = $pg->open_stream('epoch', headers => { 'Last-Event-ID' => $old });
is($c->status, 200, 'epoch: an old token is not a dead end');
ok($c->wait_for_data_events(1, 10), 'epoch: the new stream\'s messages arrive');
$c->poll(0.5);
is(scalar gaps($c), 1, 'epoch: one pgbus:gap-detected');
like((gaps($c))[0]{data}, qr/stream-recreated/, 'epoch: gap says why');
is_deeply([ datas($c) ], ['new 1'], 'epoch: only the new stream\'s messages, id restarted');
$c->close;

# ---- several streams on one connection ----
$pg->create_stream('alpha');
$pg->create_stream('beta');
$c = $pg->sse('/streams?stream=alpha&stream=beta');
is($c->status, 200, 'multi: 200');
$c->wait_for_events(1, 10);
$pg->broadcast('alpha', 'a1');
$pg->broadcast('beta', 'b1');
$pg->broadcast('alpha', 'a2');
ok($c->wait_for_data_events(3, 10), 'multi: events of both streams');
is_deeply([ datas($c) ], [ 'a1', 'b1', 'a2' ], 'multi: in commit order');
my $multi = last_id($c);
# Each stream named by its epoch (stream names can be long; epochs are short).
like($multi, qr/^\d+~\d+(_\S*)?,\d+~\d+/, "multi: one composite token ($multi)");
$c->close;
$pg->broadcast('beta', 'b2');
$pg->broadcast('alpha', 'a3');
$c = $pg->sse('/streams?stream=alpha&stream=beta', headers => { 'Last-Event-ID' => $multi });
ok($c->wait_for_data_events(2, 10), 'multi: reconnect gets what was missed');
$c->poll(0.5);
is_deeply([ sort(datas($c)) ], [ 'a3', 'b2' ], 'multi: exactly the missed ones of both streams');
$c->close;
is($pg->sse('/streams?stream=alpha&stream=beta', headers => { 'Last-Event-ID' => '5' })->status,
	400, 'multi: an unnamed cursor for several streams is refused');

# ---- durable subscriber cursors ----
$pg->create_stream('dur');
$c = $pg->open_stream('dur', query => 'subscriber=alice');
$pg->broadcast('dur', "d$_") for 1 .. 3;
ok($c->wait_for_data_events(3, 10), 'subscriber: live events');
my $deadline = time + 10;
my $stored = '';
while (time < $deadline)
{
	$stored = $pg->safe_psql('postgres',
		q{SELECT cursor FROM pgbus_stream.subscribers WHERE id = 'alice' AND stream = 'dur'});
	last if $stored eq last_id($c);
	sleep 0.1;
}
is($stored, last_id($c), 'subscriber: the stored cursor reaches the last id written');
$c->close;
$pg->broadcast('dur', "d$_") for 4 .. 5;
$c = $pg->open_stream('dur', query => 'subscriber=alice');
ok($c->wait_for_data_events(2, 10), 'subscriber: resumes without Last-Event-ID');
$c->poll(0.5);
is_deeply([ datas($c) ], [ 'd4', 'd5' ], 'subscriber: exactly what was missed');
$c->close;
$c = $pg->open_stream('dur', query => 'subscriber=bob');
$c->poll(0.5);
is(scalar $c->data_events, 0, 'subscriber: a new subscriber starts now');
$c->close;

# ---- ephemeral broadcasts ----
$pg->create_stream('eph');
$c = $pg->open_stream('eph');
$pg->safe_psql('postgres', "SELECT pgbus_stream.broadcast('eph', 'e1');
  SELECT pgbus_stream.broadcast('eph', 'e2', durable => false);
  SELECT pgbus_stream.broadcast('eph', 'e3');
  SELECT pgbus_stream.broadcast('eph', 'e4', durable => false);");
ok($c->wait_for_data_events(4, 10), 'ephemeral: delivered live at commit');
is_deeply([ datas($c) ], [qw(e1 e2 e3 e4)], 'ephemeral: in commit order');
my @eid = map { $_->{id} } $c->data_events;
$c->close;
is($pg->safe_psql('postgres', q{SELECT count(*) FROM pgbus_stream.q_pgbus_eph}), 2, 'ephemeral: no table rows');
$c = $pg->open_stream('eph', headers => { 'Last-Event-ID' => $eid[0] });
ok($c->wait_for_data_events(3, 10), 'ephemeral: short reconnect replays from memory');
$c->poll(0.3);
is_deeply([ datas($c) ], [qw(e2 e3 e4)], 'ephemeral: memory and table merged in id order');
is(scalar gaps($c), 0, 'ephemeral: no gap while memory holds them');
$c->close;
# memory_retention = 3: four more ephemeral ones push e2 and e4 out
$pg->safe_psql('postgres', join('', map { "SELECT pgbus_stream.broadcast('eph', 'f$_', durable => false);\n" } 1 .. 4));
$c = $pg->open_stream('eph', headers => { 'Last-Event-ID' => $eid[0] });
$c->poll(1);
is(scalar gaps($c), 1, 'ephemeral: beyond memory_retention a pgbus:gap-detected is sent');
like((gaps($c))[0]{data}, qr/ephemeral-expired/, 'ephemeral: gap says why');
ok((grep { $_ eq 'e3' } datas($c)) && (grep { $_ eq 'f4' } datas($c)), 'ephemeral: what is still there follows');
$c->close;

# ---- hold back: too many ids above the horizon for a 255-byte token ----
# The holes are ids drawn without an insert (nextval): rolled-back inserts
# are announced in the ring and leave none (083_horizon_hold).
$pg->create_stream('hold');
$c = $pg->open_stream('hold');
my $long = $pg->background_psql('postgres');
$long->query_safe(q{BEGIN; SELECT pgbus_stream.broadcast('hold', 'long transaction')});
my $many = '';
for my $i (1 .. 100)
{
	$many .= "SELECT pgbus_stream.broadcast('hold', 'kept $i');\n";
	$many .= "SELECT nextval(pg_get_serial_sequence('pgbus_stream.q_pgbus_hold', 'msg_id'));\n";
}
$pg->safe_psql('postgres', $many);
$c->poll(2);
my @got = $c->data_events;
ok(@got > 5 && @got < 100, 'hold: some ids sent, the rest held back (' . scalar(@got) . ' of 100)');
ok(!(grep { length($_->{id}) > 255 } @got), 'hold: no token over 255 bytes');
$long->query_safe('COMMIT');
$long->quit;
ok($c->wait_for_data_events(101, 15), 'hold: the rest arrives when the horizon moves');
$c->poll(0.5);
my @all = map { $_->{data} } $c->data_events;
is(scalar @all, 101, 'hold: every committed message exactly once');
ok(!(grep { length($_->{id}) > 255 } $c->data_events), 'hold: still no token over 255 bytes');
my $held = $pg->safe_psql('postgres', 'SELECT sum(held_back) FROM pgbus_stream.workers()');
cmp_ok($held, '>', 0, "hold: counted in workers() ($held)");
$c->close;

$pg->finish;
done_testing();
