# Logical replication: rows a subscription applies into an attached queue
# are streamed on the subscriber (its apply worker fires only row-level
# triggers enabled REPLICA or ALWAYS; see src/capture/applied.cpp).
#
# Publisher and subscriber both run the extension, each with a stream "lr"
# (same queue table); the publisher publishes the queue, the subscriber
# subscribes to it. An SSE client on each node gets every committed row once,
# in order (single rows, a multi-row transaction, COPY, rolled-back rows
# never); the subscriber is restarted and a reconnect with Last-Event-ID gets
# exactly what was replicated meanwhile. Ordinary producers never run the
# replica trigger (no duplicates on the publisher).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;
use PsqlSession;

my $pub = PgbusNode->new('pub', conf => "wal_level = logical\nmax_wal_senders = 4\nmax_replication_slots = 4\n");
my $sub = PgbusNode->new('sub');
$pub->create_stream('lr');
$sub->create_stream('lr');
is( $sub->safe_psql('postgres',
		q{SELECT tgenabled FROM pg_trigger WHERE tgname = 'pgbus_stream_applied'
		    AND tgrelid = 'pgbus_stream.q_pgbus_lr'::regclass}),
	'R',
	'the queue has a row trigger enabled REPLICA');

$pub->safe_psql('postgres', 'CREATE PUBLICATION lr_pub FOR TABLE pgbus_stream.q_pgbus_lr');
my $connstr = $pub->connstr . ' dbname=postgres';
$sub->safe_psql('postgres',
	"CREATE SUBSCRIPTION lr_sub CONNECTION '$connstr' PUBLICATION lr_pub WITH (copy_data = false)");
$pub->wait_for_catchup('lr_sub');

my $on_pub = $pub->open_stream('lr');
my $on_sub = $sub->open_stream('lr');
is($on_pub->status, 200, 'client on the publisher');
is($on_sub->status, 200, 'client on the subscriber');

my @expect;
sub send_one
{
	my ($text) = @_;
	$pub->broadcast('lr', $text);
	push @expect, $text;
	return;
}
send_one("one $_") for 1 .. 5;
$pub->safe_psql('postgres',
	q{BEGIN; SELECT pgbus_stream.broadcast('lr', 'tx ' || g) FROM generate_series(1, 4) g; COMMIT;});
push @expect, map { "tx $_" } 1 .. 4;
$pub->safe_psql('postgres',
	q{BEGIN; SELECT pgbus_stream.broadcast('lr', 'rolled back'); ROLLBACK;});
$pub->safe_psql('postgres',
	q{COPY pgbus_stream.q_pgbus_lr (message) FROM PROGRAM 'printf "{\"html\": \"copy 1\"}\n{\"html\": \"copy 2\"}\n"'});
push @expect, 'copy 1', 'copy 2';
send_one("two $_") for 1 .. 5;
$pub->wait_for_catchup('lr_sub');

sub datas { return join('|', map { $_->{data} } $_[0]->data_events) }
$on_pub->wait_for_data_events(scalar @expect, 15);
$on_sub->wait_for_data_events(scalar @expect, 15);
is(datas($on_pub), join('|', @expect), 'publisher: every row once, in order');
is(datas($on_sub), join('|', @expect), 'subscriber: every replicated row once, in order');
is( $sub->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.q_pgbus_lr'),
	scalar @expect, 'the subscriber applied every row');

# ---- ids committed out of order on the publisher ------------------------------------------
# T1 draws an id, T2 draws the next and commits first: the publisher streams
# both (its horizon waits for T1). The subscriber applies T2 first; T1's id
# is then below what it already committed, so its subscribers cannot get it:
# the row is applied (replication goes on) and a WARNING says so.
{
	my $t1 = psql_session($pub);
	session_query($t1, 'BEGIN');
	session_query($t1, q{SELECT pgbus_stream.broadcast('lr', 'late')});
	$pub->broadcast('lr', 'early');
	session_query($t1, 'COMMIT');
	session_end($t1);
	$pub->wait_for_catchup('lr_sub');
	$on_pub->wait_for_data_events(scalar(@expect) + 2, 15);
	is(datas($on_pub), join('|', @expect, 'early', 'late'), 'publisher: both, in commit order');
	is( $sub->safe_psql('postgres',
			q{SELECT count(*) FROM pgbus_stream.q_pgbus_lr WHERE message->>'html' IN ('early', 'late')}),
		'2', 'subscriber: both rows applied');
	my $deadline = time + 10;
	sleep 0.1 while time < $deadline && slurp_file($sub->logfile) !~ /replicated msg_id \d+ is not above/;
	like(slurp_file($sub->logfile), qr/WARNING:  pgbus_stream: replicated msg_id \d+ is not above \d+/,
		'subscriber: the late id is reported');
	send_one('after the late one');
	$pub->wait_for_catchup('lr_sub');
	$on_sub->wait_for_data_events(scalar @expect, 15);
	is(datas($on_sub), join('|', @expect[0 .. $#expect - 1], 'early', $expect[-1]),
		'subscriber: streaming goes on (the late row is the one not streamed)');
	@expect = (@expect[0 .. $#expect - 1], 'early', 'late', $expect[-1]);
}

# ---- the subscriber restarts; the client resumes with its last id --------------------------
my $last = ($on_sub->data_events)[-1]{id};
$on_sub->close;
$sub->stop('fast');
send_one("while down $_") for 1 .. 3;
$sub->start;
ok($sub->wait_http_ready, 'subscriber listening again');
my $missed = 3;
send_one("after $_") for 1 .. 3;
$missed += 3;
$pub->wait_for_catchup('lr_sub');
my $back = $sub->open_stream('lr', headers => { 'Last-Event-ID' => $last });
is($back->status, 200, 'reconnect on the restarted subscriber');
$back->wait_for_data_events($missed, 15);
is(datas($back), join('|', @expect[ -$missed .. -1 ]),
	'reconnect gets exactly what was replicated meanwhile');
send_one('live again');
$pub->wait_for_catchup('lr_sub');
$back->wait_for_data_events($missed + 1, 15);
is(datas($back), join('|', @expect[ -($missed + 1) .. -1 ]), 'and replicated rows live again');

$on_pub->wait_for_data_events(scalar @expect, 15);
is(datas($on_pub), join('|', @expect), 'publisher: still once each');

$sub->finish;
$pub->finish;
done_testing();
