# 044_signed_routing: a signed (gem) name opens exactly the stream the gem
# writes to (issue 26, point 8).
#
# attach('orders_internal', 'a_b') makes a private stream named a_b whose
# queue is not the gem's. The signed names a:b, A-B, a.b, A_B and a_b all
# normalise to a_b, and used to read that stream's rows. Now each waits for
# the gem's queue (pgmq.q_pgbus_a_b) and reads none of them. Once the gem
# creates its queue (auto-attached as pgbus_a_b, since a_b is taken), what
# the gem sends (pgmq.send) and what broadcast('a:b') writes reach the pages
# that waited and new ones, and both go to that queue: SQL's
# _broadcast_target and the worker apply the same rule.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use MIME::Base64 qw(encode_base64);
use Digest::SHA qw(hmac_sha256_hex);
use PgbusNode qw(sql_literal);

my $RAW = 'signed-routing-secret';
my $pg = PgbusNode->new('signroute', extension => 0, conf => "pgbus_stream.signing_secret = '$RAW'\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');

sub q1 { return $pg->safe_psql('postgres', $_[0]) }

sub signed
{
	my $data = encode_base64('"' . $_[0] . '"', '');
	return "$data--" . hmac_sha256_hex($data, $RAW);
}

sub send_html
{
	my ($queue, $html) = @_;
	return q1("SELECT pgmq.send(" . sql_literal($queue) . ", jsonb_build_object('html', " . sql_literal($html) . '))');
}

sub datas { return map { $_->{data} } $_[0]->data_events }

# A private stream named a_b on a queue of another application.
q1(q{SELECT pgmq.create('orders_internal')});
q1(q{SELECT name FROM pgbus_stream.attach('orders_internal', 'a_b')});
send_html('orders_internal', "secret $_") for 1 .. 3;

my @spellings = ('a:b', 'A-B', 'a.b', 'A_B', 'a_b');
my %page;
for my $name (@spellings)
{
	my $c = $pg->sse('/pgbus/streams/' . signed($name) . '?since=0');
	is($c->status, 200, "signed $name: 200 (waits for the gem's queue)");
	$c->wait_for_events(1, 10);
	$page{$name} = $c;
}
$_->poll(1.0) for values %page;
for my $name (@spellings)
{
	my @got = datas($page{$name});
	is_deeply(\@got, [], "signed $name reads none of orders_internal's rows")
	  or diag("got: @got");
	unlike($page{$name}->body, qr/ stream=a_b\n/, "signed $name did not open stream a_b");
}

# The gem creates its queue at its first broadcast.
q1(q{SELECT pgmq.create('pgbus_a_b')});
is(q1(q{SELECT name FROM pgbus_stream.streams WHERE queue_table = 'q_pgbus_a_b'}), 'pgbus_a_b',
	'the gem\'s queue is auto-attached under its whole name (a_b is taken)');
my $gem_id = q1(q{SELECT id FROM pgbus_stream.streams WHERE queue_table = 'q_pgbus_a_b'});
is(q1(q{SELECT stream_id FROM pgbus_stream._broadcast_target('a:b')}), $gem_id,
	'SQL: a:b names the gem\'s queue');
is(q1(q{SELECT queue FROM pgbus_stream._broadcast_target('A-B')}), 'pgmq.q_pgbus_a_b',
	'SQL: so does A-B');

send_html('pgbus_a_b', 'from the gem');
q1(q{SELECT pgbus_stream.broadcast('a:b', 'from broadcast')});
for my $name (@spellings)
{
	$page{$name}->wait_for_data_events(2, 15);
	is_deeply([ datas($page{$name}) ], [ 'from the gem', 'from broadcast' ],
		"signed $name, waiting since before the queue existed: both messages, nothing else");
	$page{$name}->close;
}
for my $name ('a:b', 'A_B')
{
	my $c = $pg->sse('/pgbus/streams/' . signed($name) . '?since=0');
	is($c->status, 200, "signed $name after the gem's queue exists: 200");
	$c->wait_for_data_events(2, 10);
	$c->poll(0.3);
	is_deeply([ datas($c) ], [ 'from the gem', 'from broadcast' ], "signed $name: the gem's queue");
	like($c->body, qr/ stream=pgbus_a_b\n/, "signed $name opens stream pgbus_a_b");
	$c->close;
}
is(q1(q{SELECT count(*) FROM pgmq.q_orders_internal}), '3', 'nothing was written to orders_internal');

$pg->finish;
done_testing();
