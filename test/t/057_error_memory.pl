# 057_error_memory: an error the worker catches outside a transaction leaves
# nothing behind.
#
# pg_cancel_backend() on an idle worker raises "canceling statement due to
# user request" at its next interrupt check, between transactions, where the
# current memory context is TopMemoryContext. 4 000 cancels, paced so that
# each one is taken on its own; the worker's memory contexts
# (pg_log_backend_memory_contexts: the grand total in use) must grow by less
# than 256 kB. Copying the error into TopMemoryContext and releasing it with
# FreeErrorData() keeps ~220 bytes per error (PostgreSQL 15 frees neither the
# filename, funcname, domain nor message_id strings it copied): 0.9 MB here.
# The worker keeps serving.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);
use PgbusNode;

my $N = 4000;

my $pg = PgbusNode->new('errmem', conf => "pgbus_stream.workers = 1\n");
$pg->create_stream('live');
my ($worker) = $pg->worker_pids;
ok($worker, "worker pid $worker");

# used_bytes asks the worker to log its memory contexts and returns the
# grand total in use.
sub used_bytes
{
	my $at = -s $pg->logfile;
	$pg->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($worker)");
	for (1 .. 100)
	{
		my ($used) = substr(slurp_file($pg->logfile), $at) =~
		  /Grand total: \d+ bytes in \d+ blocks; \d+ free \(\d+ chunks\); (\d+) used/;
		return $used if defined $used;
		sleep 0.1;
	}
	return undef;
}

# cancels sends $n cancels, 2 ms apart (the idle worker takes each within
# microseconds of its latch being set).
sub cancels
{
	my ($n) = @_;
	$pg->safe_psql('postgres', qq{
DO \$\$ BEGIN
  FOR i IN 1..$n LOOP
    PERFORM pg_cancel_backend($worker);
    PERFORM pg_sleep(0.002);
  END LOOP;
END \$\$});
}

cancels(200); # anything allocated once (a first warning, say) is allocated now
my $before = used_bytes();
ok(defined $before, "worker memory in use: $before bytes");
cancels($N);
my $after = used_bytes();
ok(defined $after, "after $N cancels: $after bytes");
my @pids = $pg->worker_pids;
is_deeply(\@pids, [$worker], 'the same worker still runs');
cmp_ok($after - $before, '<', 256 * 1024,
	sprintf('memory in use grew by %d bytes over %d errors (bound: 256 kB)', $after - $before, $N));

my $c = $pg->open_stream('live');
is($c->status, 200, 'a subscriber connects');
$pg->broadcast('live', 'still here');
ok($c->wait_for_data_events(1, 10), 'and receives');
$c->close;

$pg->finish;
done_testing();
