# 085_wal_without_library: nothing the capture writes to WAL stops a server
# that does not load the library.
#
# A. A streaming hot standby set up without the library replays a primary's
#    stream commits (in-flight transactions, out-of-order commits, a
#    rollback, a stream created and dropped) and stays up; its tables match
#    the primary's.
# B. The primary, killed (SIGKILL to the postmaster) with stream commits and
#    an open stream transaction after its last checkpoint, starts again
#    without the library in shared_preload_libraries: crash recovery replays
#    them. Started again with the library, it streams as before.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $p = PgbusNode->new('primary', allows_streaming => 1);
$p->create_stream('chat');
my $queue = $p->safe_psql('postgres',
	q{SELECT format('%I.%I', queue_schema, queue_table) FROM pgbus_stream.streams WHERE name = 'chat'});

# ---------------------------------------------------------------- A
$p->node->backup('plain');
my $s = PostgreSQL::Test::Cluster->new('plain_standby');
$s->init_from_backup($p->node, 'plain', has_streaming => 1);
$s->append_conf('postgresql.conf', "shared_preload_libraries = ''\nhot_standby = on\n");
$s->start;
is($s->safe_psql('postgres', q{SELECT count(*) FROM pg_settings
	WHERE name = 'shared_preload_libraries' AND setting LIKE '%pgbus%'}), '0',
	'A: the standby does not load the library');

# Commits of every shape the capture writes records for.
$p->broadcast('chat', "a$_") for 1 .. 5;
my $open = $p->background_psql('postgres');
$open->query_safe('BEGIN');
$open->query_safe(PgbusNode::broadcast_sql('chat', 'late'));    # draws an id, stays open
$p->broadcast('chat', 'after-late');                              # commits a higher id first
$p->safe_psql('postgres', 'BEGIN; ' . PgbusNode::broadcast_sql('chat', 'rolled back') . '; ROLLBACK');
$open->query_safe('COMMIT');
$open->quit;
$p->safe_psql('postgres', q{SELECT pgbus_stream.create_stream('other')});
$p->broadcast('other', 'o1');
$p->safe_psql('postgres', q{SELECT pgbus_stream.drop_stream('other')});
$p->safe_psql('postgres',
	'SELECT pgbus_stream.broadcast(' . PgbusNode::sql_literal('chat') . ", 'x' || g) FROM generate_series(1, 50) g");

# Replay reaches the primary's position within 30 s, the standby still up.
my $target = $p->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
$p->safe_psql('postgres', 'SELECT pg_switch_wal()');    # nothing waits for a partial page
my $replayed = 0;
my $deadline = time + 30;
while (time < $deadline)
{
	my ($rc, $out) = $s->psql('postgres', "SELECT pg_last_wal_replay_lsn() >= '$target'::pg_lsn");
	if ($rc == 0 && $out eq 't') { $replayed = 1; last }
	sleep 0.1;
}
ok($replayed, 'A: the standby without the library replayed every stream commit');
my ($rc, $out) = $s->psql('postgres', 'SELECT pg_is_in_recovery()');
is("$rc $out", '0 t', 'A: and it is still up, in recovery');
is($s->safe_psql('postgres', "SELECT count(*), max(msg_id) FROM $queue"),
	$p->safe_psql('postgres', "SELECT count(*), max(msg_id) FROM $queue"),
	'A: its queue table matches the primary\'s');
my $slog = slurp_file($s->logfile);
unlike($slog, qr/resource manager with ID \d+ not registered|FATAL|PANIC/,
	'A: no FATAL or PANIC in the standby\'s log');
$s->stop('fast');

# ---------------------------------------------------------------- B
$p->safe_psql('postgres', 'CHECKPOINT');
$p->broadcast('chat', "b$_") for 1 .. 3;
my $inflight = $p->background_psql('postgres');
$inflight->query_safe('BEGIN');
$inflight->query_safe(PgbusNode::broadcast_sql('chat', 'in flight at the crash'));
$p->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
my $before = $p->safe_psql('postgres', "SELECT count(*) FROM $queue");

# SIGKILL to the postmaster. Its children see it gone and leave; until they
# have, a start finds the shared memory still in use and fails (tried again
# below).
my $ppid = $p->node->{_pid};
$p->node->kill9;
$deadline = time + 30;
sleep 0.1 while time < $deadline && kill(0, $ppid);
eval { $inflight->quit };

$p->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
my $started = 0;
$deadline = time + 30;
while (!$started && time < $deadline)
{
	$started = $p->node->start(fail_ok => 1);
	next if $started;
	$p->node->{_pid} = undef;    # a failed start read the dead postmaster's pid file
	sleep 0.5;
}
ok($started, 'B: the primary starts without the library after the crash (crash recovery replayed the records)');
my $plog = slurp_file($p->logfile);
unlike($plog, qr/resource manager with ID \d+ not registered/, 'B: no unknown resource manager in its log');
is($p->safe_psql('postgres', "SELECT count(*) FROM $queue"), $before,
	'B: the committed rows are there, the open transaction\'s are not');

# With the library again, the stream works as before.
$p->node->stop('fast') if $started;
$p->append_conf('postgresql.conf', "shared_preload_libraries = 'pgbus_stream'\n");
$p->node->start;
ok($p->wait_http_ready, 'B: restarted with the library, the listener is back');
my $c = $p->open_stream('chat');
my $id = $p->broadcast('chat', 'back');
$c->wait_for_data_events(1, 10);
my @ev = $c->data_events;
is(scalar(@ev) ? $ev[0]{data} : undef, 'back', 'B: a broadcast reaches a subscriber again');
$c->close;

$p->finish;
done_testing();
