# 050_shmem: shared memory survives ordinary operations.
#
# A. Reload, then crash: pgbus_stream.max_connections raised by a reload,
#    then a client backend killed with SIGKILL (restart_after_crash on): the
#    postmaster re-creates shared memory in the space it requested at start,
#    so nothing that sizes it may follow a reload. The server comes back,
#    the worker listens again and delivers.
# B. Stream churn: 10 000 create_stream/drop_stream cycles (one transaction
#    each, the worker following the catalog all along) leave no shared
#    memory entry behind that a new stream could not reuse: afterwards a new
#    stream is created, served and delivers a broadcast, also with more
#    streams written at once than max_streams in total over the run.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new(
	'shmem', conf => q{
restart_after_crash = on
pgbus_stream.max_streams = 64
pgbus_stream.max_connections = 100
});

# ---------------------------------------------------------------- A
$pg->create_stream('a');
$pg->safe_psql('postgres', "ALTER SYSTEM SET pgbus_stream.max_connections = 100000");
$pg->safe_psql('postgres', 'SELECT pg_reload_conf()');
ok( $pg->poll_query_until(
		'postgres', "SELECT current_setting('pgbus_stream.max_connections') = '100000'"),
	'max_connections raised by a reload');

my $session = $pg->background_psql('postgres');
my $victim = $session->query_safe('SELECT pg_backend_pid()');
my @workers = $pg->worker_pids;
$pg->expect_kill($victim, 9);
ok(kill('KILL', $victim), "SIGKILL to a backend ($victim): crash restart");
eval { $session->quit };

# The postmaster is still there and accepts queries again.
my $up = 0;
my $deadline = time + 60;
while (time < $deadline)
{
	my ($rc) = eval { $pg->psql('postgres', 'SELECT 1', on_error_stop => 0) };
	$rc //= 1;
	if ($rc == 0) { $up = 1; last }
	sleep 0.2;
}
ok($up, 'the server is back after the crash');
unlike(slurp_file($pg->logfile), qr/could not create shared memory segment|out of shared memory/,
	'no shared memory failure in the log');
my @new = $pg->wait_workers(1, exclude => \@workers);
ok(@new, "a new worker runs (pid @new)");
ok($pg->wait_http_ready(30), 'the listener is back');
my $c = $pg->open_stream('a');
is($c->status, 200, 'a stream connects after the crash restart');
my $id = $pg->broadcast('a', 'after crash');
ok($c->wait_for_data_events(1, 10), 'and delivers');
$c->close;

# ---------------------------------------------------------------- B
# A watcher on a long-lived stream all along: its entry must stay valid
# while entries around it are reused.
my $w = $pg->open_stream('a');
is($w->status, 200, 'watcher on a');

my $t0 = time;
my ($rc, $out, $err) = $pg->psql(
	'postgres', q{
DO $$
BEGIN
  FOR i IN 1..10000 LOOP
    PERFORM pgbus_stream.create_stream('churn_' || i);
    PERFORM pgbus_stream.drop_stream('churn_' || i);
    COMMIT;
  END LOOP;
END $$;
}, on_error_stop => 1);
is($rc, 0, sprintf('10 000 create/drop cycles (%.0f s)', time - $t0)) or diag($err);

# Streams written in many transactions, each stream once: more of them than
# max_streams over the run.
($rc, $out, $err) = $pg->psql(
	'postgres', q{
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    PERFORM pgbus_stream.create_stream('w_' || i);
    COMMIT;
    PERFORM pgbus_stream.broadcast('w_' || i, 'x');
    COMMIT;
    PERFORM pgbus_stream.drop_stream('w_' || i);
    COMMIT;
  END LOOP;
END $$;
}, on_error_stop => 1);
is($rc, 0, '200 streams written, more than max_streams (64)') or diag($err);

$pg->create_stream('after');
my $c2 = $pg->open_stream('after');
is($c2->status, 200, 'a new stream is served after the churn');
my $id2 = $pg->broadcast('after', 'still works');
ok($c2->wait_for_data_events(1, 10), 'create + broadcast after the churn');
is(($c2->data_events)[0]{data}, 'still works', 'the broadcast arrives');
$pg->broadcast('a', 'watched throughout');
ok($w->wait_for_data_events(1, 10), 'the long-lived watcher still receives');
$c2->close;
$w->close;

$pg->finish;
done_testing();
