# 073_memory_tail: a client that lags a fast stream is refilled from the
# worker's memory while the rows it missed are recent
# (pgbus_stream.memory_retention_time), even when they are many more than
# memory_retention rows; without the time rule it pages from the table.
#
# Observed from outside through the table: once the rows were dispatched,
# they are deleted (as a PGMQ consumer deletes what it processed). A client
# refilled from memory still gets every one of them; one that pages from the
# table cannot get the deleted ones.
#
#  A. memory_retention = 5, memory_retention_time = 60 s: a client that does
#     not read while 400 rows of 32 kB (far more than its socket buffers
#     take) are committed, then deleted, gets all 400 once it reads, in
#     order, each once; a client that read throughout got them too.
#  B. memory_retention_time = 0 (another node, otherwise the same): the
#     stalled client gets fewer than 400, in order, each once, and the
#     worker still serves a new client.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

$SIG{PIPE} = 'IGNORE';

my $N = 400;          # rows per part
my $PAYLOAD = 32768;  # bytes of filler per row: 12.5 MiB per part
my $PER_TX = 20;      # rows per transaction

sub node
{
	my ($name, $time) = @_;
	my $node = PgbusNode->new($name, conf => qq{
pgbus_stream.memory_retention = 5
pgbus_stream.memory_retention_time = $time
pgbus_stream.queue_max_bytes = 64MB
pgbus_stream.queue_max_events = 16
pgbus_stream.socket_send_buffer = 64
});
	$node->create_stream('fast');
	return $node;
}
my $pg;

sub msgs { return map { ($_->{data} // '') =~ /^(m\d+):/ ? $1 : () } $_[0]->data_events }
sub gaps { return grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $_[0]->events }

# Commits rows m1..m$N, $PER_TX per transaction; the reading client
# follows, so every row has been dispatched when this returns.
sub publish
{
	my ($reader, $label) = @_;
	for (my $i = 1; $i <= $N; $i += $PER_TX)
	{
		my $last = $i + $PER_TX - 1;
		$last = $N if $last > $N;
		$pg->safe_psql('postgres',
			"SELECT pgbus_stream.broadcast('fast', 'm' || g || ':' || repeat('x', $PAYLOAD)) FROM generate_series($i, $last) g");
		ok($reader->wait_for_data_events($last, 30), "$label: the reading client got up to m$last")
		  or return 0;
	}
	return 1;
}

# Every row id in order and once: a subsequence of m1, m2, ...
sub in_order
{
	my ($list) = @_;
	my $prev = 0;
	for my $m (@$list)
	{
		my ($n) = $m =~ /^m(\d+)$/;
		return 0 unless $n > $prev;
		$prev = $n;
	}
	return 1;
}

# The stalled client reads; returns once nothing came for 3 s.
sub drain
{
	my ($c) = @_;
	my ($n, $quiet_since) = (-1, time);
	my $deadline = time + 60;
	while (time < $deadline)
	{
		$c->poll(0.2);
		my $now = scalar $c->data_events;
		if ($now != $n) { $n = $now; $quiet_since = time; }
		last if time - $quiet_since > 3;
	}
	return $n;
}

# A reading and a stalled client on a node; $N rows committed (the reader
# follows), then deleted from the table; then the stalled client reads.
# Returns it and the rows it got.
sub lag_then_read
{
	my ($label) = @_;
	my $reader = $pg->open_stream('fast');
	my $stalled = $pg->open_stream('fast');
	is($stalled->status, 200, "$label: the stalled client connected");
	publish($reader, $label) or BAIL_OUT('the reading client did not keep up');
	is(scalar(my @r = msgs($reader)), $N, "$label: the reading client got all $N rows");
	$reader->close;
	$pg->safe_psql('postgres', 'DELETE FROM pgbus_stream.q_pgbus_fast');
	is($pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.q_pgbus_fast'), 0, "$label: the rows are deleted from the table");
	drain($stalled);
	my @got = msgs($stalled);
	ok(in_order(\@got), "$label: what the stalled client got is in order, each once");
	return ($stalled, @got);
}

# ---------------------------------------------------------------- A
$pg = node('mtail', '60s');
{
	my ($stalled, @got) = lag_then_read('A');
	is(scalar @got, $N, "A: the stalled client gets all $N rows once it reads (from memory: the table has none)");
	is(scalar(gaps($stalled)), 0, 'A: no gap notice');
	$stalled->close;
}
$pg->finish;

# ---------------------------------------------------------------- B
$pg = node('mtail0', '0');
{
	my ($stalled, @got) = lag_then_read('B');
	note('B: the stalled client got ' . scalar(@got) . " of $N rows");
	cmp_ok(scalar @got, '<', $N, 'B: without the time rule the rows beyond memory_retention came from the table, where they were deleted');
	$stalled->close;
	my $c = $pg->open_stream('fast');
	is($c->status, 200, 'B: the worker serves a new client');
	$c->close;
}
$pg->finish;
done_testing();
