# Logical replication: rows a subscription applies into an attached queue
# are streamed on the subscriber (its apply worker fires only row-level
# triggers enabled REPLICA or ALWAYS: the capture trigger is enabled ALWAYS
# and takes such rows as applied; see src/capture/applied.cpp).
#
# Publisher and subscriber both run the extension, each with a stream "lr"
# (same queue table); the publisher publishes the queue, the subscriber
# subscribes to it. An SSE client on each node gets every committed row once,
# in order (single rows, a multi-row transaction, COPY, rolled-back rows
# never); the subscriber is restarted and a reconnect with Last-Event-ID gets
# exactly what was replicated meanwhile. Ordinary producers capture each row
# once (no duplicates on the publisher).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(token_covers);
use PsqlSession;

my $pub = PgbusNode->new('pub', conf => "wal_level = logical\nmax_wal_senders = 4\nmax_replication_slots = 4\n");
my $sub = PgbusNode->new('sub', conf => "pgbus_stream.logical_hold = 0\n");
$pub->create_stream('lr');
$sub->create_stream('lr');
is( $sub->safe_psql('postgres',
		q{SELECT string_agg(tgname || ' ' || tgenabled::text, ', ') FROM pg_trigger
		   WHERE tgrelid = 'pgbus_stream.q_pgbus_lr'::regclass AND NOT tgisinternal}),
	'pgbus_stream_capture A',
	'the queue has one capture trigger, enabled ALWAYS');

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
# both (its horizon waits for T1). The subscriber applies T2 first, then T1:
# T1's id arrives below one already committed there.
sub late_id
{
	return $pub->safe_psql('postgres',
		qq{SELECT msg_id FROM pgbus_stream.q_pgbus_lr WHERE message->>'html' = '$_[0]'});
}

# Out of order: T1 draws ($late), T2 draws the next ($early), commits and is
# applied on the subscriber (and $before is called), then T1 commits.
sub out_of_order
{
	my ($late, $early, $before) = @_;
	my $t1 = psql_session($pub);
	session_query($t1, 'BEGIN');
	session_query($t1, qq{SELECT pgbus_stream.broadcast('lr', '$late')});
	$pub->broadcast('lr', $early);
	$pub->wait_for_catchup('lr_sub');
	$before->() if $before;
	session_query($t1, 'COMMIT');
	session_end($t1);
	$pub->wait_for_catchup('lr_sub');
	return;
}

# With pgbus_stream.logical_hold = 0 (this subscriber's setting so far) the
# late row is applied, reported and not streamed to a subscription whose
# position covers it. The worker's position covers T1's id once a round bounds
# the stream after T2's row (its horizon passes T2's id); a Late record read
# before that is below the position and streamed as any row (its cursors never
# covered it: docs/ARCHITECTURE.md, "Rows applied by logical replication").
# So T1 commits once the subscriber's horizon passed T2's id.
{
	out_of_order(
		'late', 'early',
		sub {
			ok($on_sub->wait_for_data_events(scalar(@expect) + 1, 15),
				'logical_hold = 0: the subscriber\'s client has T2\'s row');
			my $early = late_id('early');
			ok( $sub->poll_query_until('postgres',
					qq{SELECT horizon >= $early FROM pgbus_stream.stats() WHERE stream = 'lr'}),
				"... and the subscriber's horizon passed its id $early");
		});
	$on_pub->wait_for_data_events(scalar(@expect) + 2, 15);
	is(datas($on_pub), join('|', @expect, 'early', 'late'), 'publisher: both, in commit order');
	is( $sub->safe_psql('postgres',
			q{SELECT count(*) FROM pgbus_stream.q_pgbus_lr WHERE message->>'html' IN ('early', 'late')}),
		'2', 'subscriber: both rows applied');
	my $deadline = time + 10;
	sleep 0.1 while time < $deadline && slurp_file($sub->logfile) !~ /replicated msg_id \d+ is not above/;
	like(slurp_file($sub->logfile), qr/WARNING:  pgbus_stream: replicated msg_id \d+ is not above \d+/,
		'logical_hold = 0: the late id is reported');
	my $late = late_id('late');
	ok($on_sub->wait_until(sub { grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $on_sub->events }, 10),
		'logical_hold = 0: the connected client is told');
	my ($gap) = grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $on_sub->events;
	like($gap->{data} // '', qr/"reason":"late","ids":\[$late\]/, "... that id $late is missing");
	send_one('after the late one');
	$pub->wait_for_catchup('lr_sub');
	$on_sub->wait_for_data_events(scalar(@expect) + 1, 15); # and 'early'
	is(datas($on_sub), join('|', @expect[0 .. $#expect - 1], 'early', $expect[-1]),
		'logical_hold = 0: streaming goes on (the late row is the one not streamed)');
	@expect = (@expect[0 .. $#expect - 1], 'early', 'late', $expect[-1]);
	$on_sub->close;
	$on_sub = $sub->open_stream('lr');
	is($on_sub->status, 200, 'a new client on the subscriber');
}

# With the hold (5 s, the default) cursors on the subscriber stay below what was
# applied lately, so the late row is streamed once: live to connected
# clients, and to a client that left after T2's row and comes back with its
# last id. No report.
{
	$sub->safe_psql('postgres', q{ALTER SYSTEM SET pgbus_stream.logical_hold = '5s'});
	$sub->safe_psql('postgres', q{SELECT pg_reload_conf()});
	sleep 1; # the apply worker reads it at its next message
	my $warnings = () = slurp_file($sub->logfile) =~ /replicated msg_id \d+ is not above/g;
	send_one('hold starts');
	$pub->wait_for_catchup('lr_sub');
	$on_sub->wait_for_data_events(1, 15);
	my $mover = $sub->open_stream('lr');
	is($mover->status, 200, 'hold: a second client on the subscriber');
	my $n = 0;
	my $left_at;
	out_of_order(
		'late 2', 'early 2',
		sub {
			ok($mover->wait_for_data_events(1, 15), 'hold: the moving client has T2\'s row');
			$left_at = ($mover->data_events)[-1];
			$mover->close;
		});
	my $late = late_id('late 2');
	is($left_at->{data}, 'early 2', 'hold: T2\'s row came first');
	ok(!token_covers($left_at->{id}, $late), "hold: its cursor ($left_at->{id}) leaves T1's id $late out");
	push @expect, 'early 2', 'late 2';
	$on_sub->wait_for_data_events(3, 15);
	is(datas($on_sub), 'hold starts|early 2|late 2', 'hold: a connected client gets the late row live, once');
	my $back = $sub->open_stream('lr', headers => { 'Last-Event-ID' => $left_at->{id} });
	is($back->status, 200, 'hold: the moving client reconnects with its last id');
	send_one('after the hold');
	$pub->wait_for_catchup('lr_sub');
	$back->wait_for_data_events(2, 15);
	$on_sub->wait_for_data_events(4, 15);
	is(datas($back), 'late 2|after the hold', 'hold: the reconnect gets the late row once, then live ones');
	is(datas($on_sub), 'hold starts|early 2|late 2|after the hold', 'hold: the connected client, still once each');
	my $now = () = slurp_file($sub->logfile) =~ /replicated msg_id \d+ is not above/g;
	is($now, $warnings, 'hold: nothing reported');
	$back->close;
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
