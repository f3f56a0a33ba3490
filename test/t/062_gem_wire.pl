# 062_gem_wire: what the pgbus gem's <pgbus-stream-source> element sees on
# a queue the gem made.
#
# The page is rendered with since-id = MAX(msg_id) of the queue; two
# messages are broadcast before the element connects with
# fetch(src?since=<since-id>): it gets the preamble (retry: first, the
# open comment), exactly those two and then live ones, heartbeats. On a
# worker restart it gets pgbus:shutdown WITHOUT an id: line (the gem's
# "id: 0" reset Last-Event-ID and the reconnect replayed everything), so
# its reconnect with ?since=<last id> gets exactly what was sent meanwhile.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode qw(sql_literal);

my $pg = PgbusNode->new('gemwire', extension => 0, bearer_all => 1);
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
my $queue = $pg->safe_psql('postgres', q{SELECT pgbus_stream.queue_name('ai_chat_7b1e:messages')});
$pg->safe_psql('postgres', "SELECT pgmq.create('$queue')");
my $stream = $pg->safe_psql('postgres', "SELECT name FROM pgbus_stream.streams WHERE queue_name = '$queue'");
is($stream, 'ai_chat_7b1e_messages', 'the gem\'s queue is a stream');
ok(defined $pg->wait_stream_served($stream), 'served');

sub send_html
{
	return $pg->safe_psql('postgres',
		"SELECT pgmq.send('$queue', jsonb_build_object('html', " . sql_literal($_[0]) . '))');
}

send_html("earlier $_") for 1 .. 2;
my $since = $pg->safe_psql('postgres', "SELECT max(msg_id) FROM pgmq.q_$queue");
is($since, '2', 'page rendered with since-id = MAX(msg_id) = 2');
my @ids = map { send_html($_) } ('<p>A</p>', '<p>B</p>');

my $c = $pg->sse("/streams/$stream?since=$since");
is($c->status, 200, 'fetch(src?since=<since-id>): 200');
ok($c->wait_for_data_events(2, 10), 'A and B arrive');
like($c->body, qr/\Aretry: (?:1\d{3}|2\d{3}|3000)\n/, 'the body starts with retry: (1 to 3 s)');
like($c->body, qr/^: pgbus stream open since_id=\S+ stream=\Q$stream\E$/m, 'then the open comment');
my $c_id = send_html('<p>C</p>');
ok($c->wait_for_data_events(3, 10), 'live C arrives');
is_deeply([ map { $_->{data} } $c->data_events ], [ '<p>A</p>', '<p>B</p>', '<p>C</p>' ],
	'exactly A, B, C');
is_deeply([ map { $_->{id} =~ /~(\d+)$/ ? $1 : $_->{id} } $c->data_events ], [ @ids, $c_id ],
	'ids above since-id, ascending');
ok(defined $c->wait_for_comment(qr/^heartbeat \d+$/, 5), 'heartbeats');
my $last = ($c->data_events)[-1]{id};

# Worker restart: pgbus:shutdown without an id line.
my @pids = $pg->worker_pids;
$pg->expect_exit($pids[0], 1);
ok(kill('TERM', $pids[0]), 'SIGTERM the worker');
ok($c->wait_until(sub { grep { ($_->{event} // '') eq 'pgbus:shutdown' } $_[0]->events }, 10),
	'pgbus:shutdown arrives');
my ($shutdown) = grep { ($_->{event} // '') eq 'pgbus:shutdown' } $c->events;
unlike($shutdown->{raw}, qr/^id:/m, 'pgbus:shutdown has no id: line');
is($shutdown->{data}, '{"reason":"worker_restart"}', 'pgbus:shutdown data is the gem\'s');
unlike($c->body, qr/^id: 0$/m, 'no "id: 0" anywhere');
ok($c->wait_closed(10), 'the stream ends');
$c->close;

my @later = map { send_html("while restarting $_") } 1 .. 2;
ok($pg->wait_workers(1, exclude => \@pids), 'the worker is back');
ok($pg->wait_http_ready(30), 'listening again');
$c = $pg->sse("/streams/$stream?since=$last");
is($c->status, 200, 'EventSource(src?since=<last id>): 200');
ok($c->wait_for_data_events(2, 10), 'what was sent meanwhile arrives');
$c->poll(0.5);
is_deeply([ map { $_->{data} } $c->data_events ], [ map { "while restarting $_" } 1 .. 2 ],
	'exactly that, nothing replayed twice');
$c->close;

$pg->finish;
done_testing();
