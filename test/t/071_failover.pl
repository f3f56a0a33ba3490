# 071_failover: the primary stops, its hot standby is promoted with
# pg_promote(); the standby's worker keeps serving without a restart.
#
# - A subscriber connected to the standby stays connected and gets what the
#   new primary broadcasts; capture works there.
# - A client of the old primary reconnects to the new one with its last id
#   and gets exactly what it missed (committed on the old primary after it
#   left, and on the new one).
# - A transaction that was open on the old primary when it stopped leaves a
#   floor on the standby; after the promotion it is swept (the transaction
#   is aborted) and the horizon moves past its id.
# - A durable subscriber's cursor is kept in memory on the standby (nothing
#   is written there) and stored once the node is promoted.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(parse_token token_covers frames_ok);

my $p = PgbusNode->new('old_primary', allows_streaming => 1);
$p->create_stream('fo');
my $s = PgbusNode->standby('new_primary', $p);
$p->wait_for_catchup($s->node, 'replay');
ok(defined $s->wait_stream_served('fo'), 'the standby serves the stream');

sub horizon_of
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		q{SELECT coalesce(max(horizon), 0) FROM pgbus_stream.stats() WHERE stream = 'fo'});
}

my @sent;
my $cs = $s->open_stream('fo');
my $cd = $s->open_stream('fo', query => 'subscriber=sub1');
my $cp = $p->open_stream('fo');
is($cs->status, 200, 'a subscriber on the standby');
is($cd->status, 200, 'a durable subscriber on the standby');
push @sent, [ $p->broadcast('fo', "p$_"), "p$_" ] for 1 .. 5;
ok($cp->wait_for_data_events(5, 10), 'the old primary client got 5');
ok($cs->wait_for_data_events(5, 10), 'the standby subscriber got 5');
ok($cd->wait_for_data_events(5, 10), 'the durable subscriber got 5');
my $left = ($cp->data_events)[-1]{id};
$cp->close;
sleep 1.5;    # a cursor flush interval
is($s->safe_psql('postgres', q{SELECT count(*) FROM pgbus_stream.subscribers WHERE id = 'sub1'}),
	'0', 'nothing is written on the standby: the durable cursor is held in memory');

push @sent, [ $p->broadcast('fo', "p$_"), "p$_" ] for 6 .. 7;    # after the client left

# A transaction open when the primary stops.
my $open = $p->background_psql('postgres', on_error_stop => 0);
$open->query_safe('BEGIN');
my $lost_id = $open->query_safe(q{SELECT pgbus_stream.broadcast('fo', 'never committed')});
# The open transaction's records are sent once something flushes them: any
# later commit that wrote WAL does (as one would before a later broadcast
# reaches anyone). A commit that wrote nothing but its commit record, as
# SELECT pg_current_xact_id() alone, is not flushed at once.
$p->safe_psql('postgres', 'CREATE TABLE wal_mark (i int); INSERT INTO wal_mark VALUES (1)');
$p->wait_for_catchup($s->node, 'replay');
ok($cs->wait_for_data_events(7, 10), 'the standby subscriber got 7 before the failover');
cmp_ok($s->safe_psql('postgres', 'SELECT standby_floors FROM pgbus_stream.replication()'),
	'>=', 1, 'the standby holds the open transaction\'s floor')
  or diag($s->safe_psql('postgres', 'SELECT * FROM pgbus_stream.replication()'));

my @pids = $s->worker_pids;
is(scalar @pids, 1, 'one worker on the standby');
$p->stop('fast');
eval { $open->quit };
$s->safe_psql('postgres', 'SELECT pg_promote()');
my $deadline = time + 30;
sleep 0.1 while $s->safe_psql('postgres', 'SELECT pg_is_in_recovery()') eq 't' && time < $deadline;
is($s->safe_psql('postgres', 'SELECT in_recovery FROM pgbus_stream.replication()'), 'f', 'promoted');
is_deeply([ $s->worker_pids ], \@pids, 'the same worker process serves after the promotion');

# Capture on the new primary.
push @sent, [ $s->broadcast('fo', "s$_"), "s$_" ] for 1 .. 3;
cmp_ok($sent[-3][0], '>', $lost_id, 'the new primary draws ids after the lost one');
ok($cs->wait_for_data_events(10, 10), 'the connection held across the promotion gets the new broadcasts');
frames_ok([ $cs->data_events ], \@sent, undef, 'standby subscriber across the failover');

my $back = $s->open_stream('fo', headers => { 'Last-Event-ID' => $left });
ok($back->wait_for_data_events(5, 10), "the old primary's client reconnects to the new one");
frames_ok([ $back->data_events ], [ @sent[ 5 .. 9 ] ], $left,
	'exactly what it missed, from both primaries');
$back->close;

$deadline = time + 10;
my $floors;
while (time < $deadline)
{
	$floors = $s->safe_psql('postgres', 'SELECT standby_floors FROM pgbus_stream.replication()');
	last if $floors eq '0';
	sleep 0.1;
}
is($floors, '0', "the aborted transaction's floor was swept");
$deadline = time + 10;
sleep 0.1 while horizon_of($s) < $sent[-1][0] && time < $deadline;
cmp_ok(horizon_of($s), '>=', $sent[-1][0], "the horizon passes the aborted id $lost_id");

ok($cd->wait_for_data_events(10, 10), 'the durable subscriber got everything');
$deadline = time + 10;
my $stored = '';
while (time < $deadline)
{
	$stored = $s->safe_psql('postgres', q{SELECT cursor FROM pgbus_stream.subscribers WHERE id = 'sub1'});
	last if $stored ne '' && token_covers($stored, $sent[-1][0]);
	sleep 0.2;
}
ok($stored ne '' && token_covers($stored, $sent[-1][0]),
	"the durable cursor is stored after the promotion ($stored)");
$cs->close;
$cd->close;

$s->finish;
$p->check_log;
done_testing();
