# 033_no_loss: the ways a committed message used to go missing without a word.
#
# 1. A worker query that fails (a lock held on the archive table makes it
#    time out; pg_cancel_backend of the worker cancels it) counts nothing as
#    delivered: the row is read again later and nothing after it is
#    skipped. Meanwhile another stream keeps delivering.
# 8. A row deleted from the queue before the worker could read it is
#    announced (pgbus:gap-detected, reason "deleted", with its id).
# 2. Ids not drawn in commit order (a sequence with CACHE 10 and two
#    producers, setval backwards): an insert whose id the horizon may
#    already have passed is refused with a clear error, and so is an id
#    given with OVERRIDING SYSTEM VALUE above the sequence; every committed
#    row is delivered.
# 3. Lag, not loss: a burst of 30 transactions x 100 rows x 2 kB reaches one
#    fast reader whole and in order; a reader that stops for seconds and then
#    reads gets everything; a message larger than the queue bound arrives.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;
use PsqlSession;

my $pg = PgbusNode->new('noloss', conf => "pgbus_stream.inline_payload_max = 1kB\n");
$pg->create_stream('locked');
$pg->create_stream('other');

sub datas { return map { $_->{data} // '' } $_[0]->data_events }

sub worker_pid
{
	return $pg->safe_psql('postgres', 'SELECT pid FROM pgbus_stream.workers() ORDER BY pid LIMIT 1');
}

# Locks the stream's archive table (the worker reads the queue and its
# archive together; producers only write the queue), then commits a row too
# large for the ring: the worker must read it from the tables, and cannot
# while the lock is held.
sub commit_under_lock
{
	my ($producer, $locker, $data) = @_;
	session_query($locker, 'BEGIN');
	session_query($locker, 'LOCK TABLE pgbus_stream.a_pgbus_locked IN ACCESS EXCLUSIVE MODE');
	my $id = session_query($producer, "SELECT pgbus_stream.broadcast('locked', '$data')");
	chomp $id;
	return $id;
}

# ---- 1. a failing read counts nothing and skips nothing --------------------
{
	my $a = $pg->open_stream('locked');
	my $b = $pg->open_stream('other');
	my $producer = psql_session($pg);
	my $locker = psql_session($pg);
	my $big = 'L' x 3000;
	commit_under_lock($producer, $locker, $big);
	# While the table is locked the worker's reads fail; another stream goes on.
	$pg->broadcast('other', 'while locked');
	ok($b->wait_for_data_events(1, 5), 'locked: another stream still delivers while a queue table is locked');
	# Cancel the worker's statements a few times (the read waiting on the lock, if any).
	for (1 .. 3)
	{
		$pg->safe_psql('postgres', 'SELECT pg_cancel_backend(' . worker_pid() . ')');
		sleep 0.2;
	}
	is(scalar($a->data_events), 0, 'locked: nothing delivered while the row cannot be read');
	session_query($locker, 'COMMIT');
	$pg->broadcast('locked', 'after');
	ok($a->wait_for_data_events(2, 10), 'locked: once the lock goes, the row is read again');
	is_deeply([ datas($a) ], [ $big, 'after' ], 'locked: the row and the next one, once each, in order');
	my $failed = $pg->safe_psql('postgres', q{SELECT failed FROM pgbus_stream.stats() WHERE stream = 'locked'});
	is($failed, 0, 'locked: no row counted as failed');

	# ---- 8. a row deleted before the worker read it is announced ----
	my $gone = commit_under_lock($producer, $locker, 'D' x 3000);
	# Deleted while the archive is still locked, once the worker has tried
	# and failed; the lock goes after any read begun before the delete has
	# timed out (such a read would rightly still see the row).
	my $deadline = time + 10;
	sleep 0.05 until time > $deadline || $pg->safe_psql('postgres',
		q{SELECT count(*) FROM pg_locks l JOIN pgbus_stream.workers() w ON w.pid = l.pid WHERE NOT l.granted}) > 0;
	$pg->safe_psql('postgres', "DELETE FROM pgbus_stream.q_pgbus_locked WHERE msg_id = $gone");
	sleep 0.3;
	session_query($locker, 'COMMIT');
	$pg->broadcast('locked', 'after delete');
	ok($a->wait_until(sub { grep { ($_->{data} // '') eq 'after delete' } $_[0]->events }, 10),
		'deleted: the next row arrives');
	my ($gap) = grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $a->events;
	ok($gap, 'deleted: a pgbus:gap-detected notice came');
	ok(!grep({ ($_->{data} // '') =~ /^D/ } $a->events), 'deleted: the deleted row itself did not come');
	like($gap->{data} // '', qr/"reason":"deleted","ids":\[$gone\]/, "deleted: it names the deleted row ($gone)");
	session_end($producer);
	session_end($locker);
	$a->close;
	$b->close;
}

# ---- 2. ids not drawn in commit order ------------------------------------------
{
	$pg->create_stream('ord');
	my $seq = $pg->safe_psql('postgres', q{SELECT pg_get_serial_sequence('pgbus_stream.q_pgbus_ord', 'msg_id')});
	$pg->safe_psql('postgres', "ALTER SEQUENCE $seq CACHE 10");
	my $c = $pg->open_stream('ord');
	my ($p1, $p2) = (psql_session($pg), psql_session($pg));
	my %sent;
	my @refused;
	my $send = sub {
		my ($s, $data, $sql) = @_;
		my ($out, $err) = session_query($s, $sql // "SELECT pgbus_stream.broadcast('ord', '$data')", 1);
		if ($err =~ /ERROR/) { push @refused, $err } else { $sent{$data} = 1 }
		return $err;
	};
	$send->($p1, 'p1-a');    # p1 caches ids 1..10
	$send->($p2, 'p2-a');    # p2 caches 11..20 and commits 11
	my $err = $send->($p1, 'p1-b');    # p1 would insert 2, below the committed 11
	like($err, qr/msg_id 2 is not above 11, the highest id already committed/,
		'cache 10: an id below one already committed is refused at once, with the reason');
	like($err, qr/HINT:.*setval/, 'cache 10: the hint says how to go on');
	$pg->safe_psql('postgres', "ALTER SEQUENCE $seq CACHE 1");
	$send->($p2, 'p2-b');
	$err = $send->($p1, 'far', q{INSERT INTO pgbus_stream.q_pgbus_ord (msg_id, message) OVERRIDING SYSTEM VALUE
		VALUES (1000000, '{"html": "far"}')});
	like($err, qr/msg_id 1000000 is above \d+, the last value of the sequence/,
		'overriding far above the sequence: refused (it would refuse every later id)');
	# (sessions keep the ids they cached: the next ones come from new sessions)
	my $fresh = sub {
		my ($data) = @_;
		my ($ret, $out, $e) = $pg->psql('postgres', "SELECT pgbus_stream.broadcast('ord', '$data')");
		if ($ret == 0) { $sent{$data} = 1 } else { push @refused, $e }
		return $e // '';
	};
	$pg->safe_psql('postgres', "SELECT setval('$seq', 1000000)");
	$fresh->('after-setval');
	$pg->safe_psql('postgres', "SELECT setval('$seq', 5)");
	$err = $fresh->('setval-back');
	like($err, qr/msg_id 6 is not above 1000001/, 'setval backwards: refused');
	session_end($_) for $p1, $p2;
	my @want = qw(p1-a p2-a p2-b after-setval);
	is_deeply([ sort keys %sent ], [ sort @want ], 'the inserts that were not refused');
	ok($c->wait_for_data_events(scalar @want, 10), 'every committed row arrives');
	$c->poll(0.5);
	is_deeply([ sort(datas($c)) ], [ sort @want ], 'exactly the committed rows, none skipped');
	is(scalar(@refused), 3, 'three inserts refused');
	$c->close;
}

# ---- 3. lag instead of loss --------------------------------------------------
{
	$pg->create_stream('burst');
	my $fast = $pg->open_stream('burst');
	my $stalled = $pg->open_stream('burst');    # reads nothing until later
	my $sql = join('', map {
		"INSERT INTO pgbus_stream.q_pgbus_burst (message) SELECT jsonb_build_object('html', 't$_-' || g || '-' || repeat('x', 2000)) FROM generate_series(1, 100) g;\n"
	} 1 .. 30);
	$pg->safe_psql('postgres', $sql);
	my $t0 = time;
	$fast->wait_for_data_events(3000, 60);
	my @got = datas($fast);
	is(scalar(@got), 3000, 'burst: a fast reader gets all 3000 rows of 30 x 100 x 2 kB');
	my @expect = map { my $t = $_; map { "t$t-$_-" . ('x' x 2000) } 1 .. 100 } 1 .. 30;
	ok(@got == 3000 && join("\n", @got) eq join("\n", @expect), 'burst: in commit order');
	is(scalar(grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $fast->events), 0, 'burst: no gap notice');
	# The stalled client's socket and queue filled up long ago; it reads now.
	sleep 2;
	my $rows = $pg->safe_psql('postgres', q{SELECT count(*) FROM pgbus_stream.connections() WHERE state = 'replaying'});
	cmp_ok($rows, '>=', 1, 'stalled: its connection waits (replaying), nothing dropped');
	$stalled->wait_for_data_events(3000, 60);
	my @late = datas($stalled);
	is(scalar(@late), 3000, 'stalled: reading again, it gets every row');
	ok(@late == 3000 && join("\n", @late) eq join("\n", @expect), 'stalled: in order');
	my $dropped = $pg->safe_psql('postgres', q{SELECT overflow_dropped FROM pgbus_stream.stats() WHERE stream = 'burst'});
	is($dropped, 0, 'no frame dropped');
	# One message larger than the whole queue bound (1 MB by default).
	my $huge = 'h' x (1536 * 1024);
	$pg->broadcast('burst', $huge);
	ok($fast->wait_for_data_events(3001, 30), 'a message larger than queue_max_bytes arrives');
	is(length((datas($fast))[-1] // ''), length($huge), 'whole');
	$fast->close;
	$stalled->close;
}

$pg->finish;
done_testing();
