# 087_opening_id: a client that drops before its first message loses
# nothing.
#
# The stream's opening frames end with the starting cursor as an id (a
# frame with an id and no data: an EventSource takes it as its last event
# id and dispatches nothing). A client connects without a cursor, the
# worker stops before any broadcast, three broadcasts commit while it
# restarts, and the client comes back as an EventSource does, with the id
# it holds as Last-Event-ID: it gets the three, each once, in order.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new('main');
$pg->create_stream('chat');
$pg->broadcast('chat', 'before');    # not for this client: it starts from now

my $c = $pg->open_stream('chat');
ok($c->wait_for_events(1, 10), 'the client has the opening frames');
$c->poll(0.3);
my $id0 = $c->last_event_id;
ok(defined $id0 && PgbusNode::parse_token($id0),
	'its EventSource holds the starting cursor as last event id (' . ($id0 // 'none') . ')');
my ($since) = $c->body =~ /^: pgbus stream open since_id=(\S+)/m;
is($id0, $since, 'the same cursor as the open comment names');
is(scalar($c->data_events), 0, 'and no message');

my @pids = $pg->worker_pids;
$pg->expect_exit($pids[0], 1);
ok(kill('TERM', $pids[0]), "the worker stops (SIGTERM $pids[0]) before the first broadcast");
ok($c->wait_closed(10), 'the connection ends');
my @sent = map { $pg->broadcast('chat', "while restarting $_") } 1 .. 3;
ok($pg->wait_workers(1, exclude => \@pids), 'the worker is back');
ok($pg->wait_http_ready(30), 'its listener too');

# The EventSource reconnects with what it holds.
my $last = $c->last_event_id;
$c->close;
my $r = $pg->sse('/streams/chat', headers => defined $last ? { 'Last-Event-ID' => $last } : {});
is($r->status, 200, 'the reconnect is served');
$r->wait_for_data_events(3, 15);
$r->poll(0.5);
is_deeply([ map { $_->{data} } $r->data_events ], [ map { "while restarting $_" } 1 .. 3 ],
	'every broadcast of the restart arrives, once, in order');

$pg->finish;
done_testing();
