# 053_errors_shutdown: quiet logs, errors at the PostgreSQL boundary, and a
# fast shutdown that no lock can hold up.
#
# A. A database without the extension: the worker logs no warning round
#    after round (retention_interval 1 s, 4 s watched).
# B. History off (stats_enabled off): the worker never touches the history
#    table (a lock on it would hold the worker: it must not wait on it).
# C. A query error is reported intact: a replay of a stream whose queue
#    table was dropped under the worker fails, and the warning carries
#    PostgreSQL's message, read after the failed transaction was cleaned up
#    (freed memory would show as garbage under an assert-enabled build).
#    Other streams are served meanwhile.
# D. Fast shutdown while the worker's query waits on a lock that a prepared
#    transaction holds (it survives the shutdown, so only cancelling the
#    query can free the worker): the server stops within a few seconds.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IO::Socket::INET;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

$SIG{PIPE} = 'IGNORE';

my $pg = PgbusNode->new(
	'errs',
	extension => 0,
	conf => q{
pgbus_stream.retention_interval = 1
max_prepared_transactions = 2
});

# ---------------------------------------------------------------- A
my $log_at = -s $pg->logfile;
sleep 4;
my $tail = substr(slurp_file($pg->logfile), $log_at);
my @warnings = grep { /WARNING/ } split /\n/, $tail;
is(scalar @warnings, 0, 'no extension in the database: no warning in 4 retention rounds')
  or diag(join("\n", @warnings[ 0 .. ($#warnings < 4 ? $#warnings : 4) ]));

# ---------------------------------------------------------------- B
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
$pg->create_stream('ok');
my $locker = $pg->background_psql('postgres');
$locker->query_safe('BEGIN; LOCK TABLE pgbus_stream.stream_stats IN ACCESS EXCLUSIVE MODE');
my $waited = 0;
for (1 .. 30)
{
	$waited = $pg->safe_psql(
		'postgres', q{
SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE a.backend_type = 'pgbus_stream worker' AND NOT l.granted
  AND l.relation = 'pgbus_stream.stream_stats'::regclass});
	last if $waited;
	sleep 0.1;
}
is($waited, 0, 'history off: the worker does not touch stream_stats (3 s, 3 retention rounds)');
$locker->query_safe('COMMIT');
$locker->quit;

# ---------------------------------------------------------------- C
$pg->create_stream('broken');
$pg->broadcast('broken', 'x');
my ($qs, $qt) = split /\|/,
  $pg->safe_psql('postgres', "SELECT queue_schema, queue_table FROM pgbus_stream.streams WHERE name = 'broken'");
# Renamed, not dropped: a dropped queue table makes the stream go (sql_drop).
$pg->safe_psql('postgres', qq{ALTER TABLE "$qs"."$qt" RENAME TO "${qt}_elsewhere"});
$log_at = -s $pg->logfile;
my $c = $pg->sse('/streams/broken?replay=all');
my $msg;
for (1 .. 100)
{
	# (a failed read is retried: "<what> failed (retried later): <message>")
	($msg) = substr(slurp_file($pg->logfile), $log_at) =~
	  /WARNING:  pgbus_stream: (?:worker error|[a-z ]+ failed \(retried later\)): (.*)/;
	last if defined $msg;
	sleep 0.1;
}
like($msg // '', qr/^relation "\Q$qs.$qt\E" does not exist$/,
	'the failed read is logged with PostgreSQL\'s message, intact after the abort')
  or diag(unpack('H*', $msg // ''));
# The failing replay is retried, and must not stop the listener meanwhile.
my $ok = eval { $pg->open_stream('ok', timeout => 10) };
is($ok ? $ok->status : "no answer: $@", 200, 'another stream is served while that replay fails');
$pg->broadcast('ok', 'fine');
ok($ok && $ok->wait_for_data_events(1, 10), 'and delivers');
$ok->close if $ok;
$c->close;
$pg->safe_psql('postgres', "DELETE FROM pgbus_stream.streams WHERE name = 'broken'; SELECT pgbus_stream._catalog_changed(NULL)");

# ---------------------------------------------------------------- D
# Rows nobody watched when they were sent: a replay reads them from the table.
$pg->create_stream('locked');
$pg->broadcast('locked', "unwatched $_") for 1 .. 3;
($qs, $qt) = split /\|/,
  $pg->safe_psql('postgres', "SELECT queue_schema, queue_table FROM pgbus_stream.streams WHERE name = 'locked'");
$pg->safe_psql('postgres',
	qq{BEGIN; LOCK TABLE "$qs"."$qt" IN ACCESS EXCLUSIVE MODE; PREPARE TRANSACTION 'hold'});
# A replay makes the worker read the table: it waits on the lock, gives up
# after a short lock timeout and retries with backoff (up to 1 s apart), so
# it is seen by the warning of a read that gave up on the lock.
$log_at = -s $pg->logfile;
my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $pg->http_port, Proto => 'tcp')
  or die "connect: $!";
print $s "GET /streams/locked?replay=all HTTP/1.1\r\nHost: x\r\n\r\n";
my $gave_up = 0;
for (1 .. 100)
{
	$gave_up = () = substr(slurp_file($pg->logfile), $log_at) =~ /row read failed \(retried later\): canceling statement due to lock timeout/g;
	last if $gave_up >= 2;
	sleep 0.1;
}
cmp_ok($gave_up, '>=', 2, "the worker waits on the lock of the prepared transaction and retries ($gave_up reads gave up)");
my $t0 = time;
my $rc = system('pg_ctl', '-D', $pg->data_dir, '-m', 'fast', '-t', '20', 'stop');
my $took = time - $t0;
is($rc, 0, 'fast shutdown completed');
cmp_ok($took, '<', 10, sprintf('within a few seconds (%.1f s)', $took));
if ($rc != 0)
{
	system('pg_ctl', '-D', $pg->data_dir, '-m', 'immediate', 'stop');
}
$pg->node->{_pid} = undef; # stopped here, not by the framework
close $s;
$pg->check_log;

done_testing();
