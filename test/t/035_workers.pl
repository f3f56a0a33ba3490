# Several workers on one port share one connection limit
# (docs/ARCHITECTURE.md, "One limit for the node").
#
# A. workers = 2, max_connections = 10: whichever worker the kernel hands a
#    connection to, the first 10 are served (none refused while the node has
#    room), they spread over both workers (connections()), and the 11th gets
#    503 with Retry-After. Three rounds, all closed in between.
# B. A worker stopped with connections gives their places back: after its
#    restart the node again holds exactly 10.
# C. A client moves between workers with Last-Event-ID: every reconnect gets
#    exactly what it missed, also on the other worker, and live delivery
#    works on both.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use PgbusNode;

my $max = 10;
my $pg = PgbusNode->new('workers',
	conf => "pgbus_stream.workers = 2\npgbus_stream.max_connections = $max\n");
my @pids = $pg->wait_workers(2);
is(scalar @pids, 2, 'two workers run');
$pg->create_stream('w');

# The worker serving a connection, from connections() (published within 500 ms).
sub worker_of
{
	my ($c) = @_;
	my ($connected) = grep { ($_->{event} // '') eq 'pgbus:connected' } $c->events;
	return undef unless $connected;
	my $id = JSON::PP::decode_json($connected->{data})->{connectionId};
	my $deadline = time + 10;
	while (time < $deadline)
	{
		my $w = $pg->safe_psql('postgres',
			"SELECT worker FROM pgbus_stream.connections() WHERE id = '$id'");
		return $w if $w ne '';
		sleep 0.1;
	}
	return undef;
}

sub live_rows
{
	return $pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.connections()');
}

sub wait_rows
{
	my ($n) = @_;
	my $deadline = time + 15;
	while (time < $deadline)
	{
		return 1 if live_rows() == $n;
		sleep 0.1;
	}
	return 0;
}

# Opens connections until $max are served or one is refused; returns the
# served ones and the statuses of all.
sub fill
{
	my (@ok, @statuses);
	while (@ok < $max && @statuses < $max)
	{
		my $c = $pg->open_stream('w');
		push @statuses, $c->status;
		push @ok, $c if $c->status == 200;
	}
	return (\@ok, \@statuses);
}

# ---- A. one limit, spread over both workers ----------------------------------------------
for my $round (1 .. 3)
{
	my ($ok, $statuses) = fill();
	is(scalar(@$ok), $max, "round $round: the first $max connections are all served")
	  or diag("statuses: @$statuses");
	ok(wait_rows(scalar @$ok), "round $round: connections() lists them");
	my %per;
	$per{ worker_of($_) // 'unknown' }++ for @$ok;
	# The kernel picks the worker by a hash of the client's address and port:
	# reconnect a few until both workers hold some (each try: one half chance).
	for (my $try = 0; $try < 20 && keys(%per) < 2 && @$ok; $try++)
	{
		my $c = shift @$ok;
		$per{ worker_of($c) }--;
		$c->close;
		delete $per{$_} for grep { !$per{$_} } keys %per;
		ok(wait_rows(scalar @$ok), "round $round: one closed") or last;
		my $n = $pg->open_stream('w');
		last unless $n->status == 200;
		push @$ok, $n;
		$per{ worker_of($n) // 'unknown' }++;
	}
	is(join(',', sort keys %per), '0,1', "round $round: connections on both workers")
	  or diag(explain \%per);
	note("round $round: per worker " . join(', ', map { "$_: $per{$_}" } sort keys %per));

	my $over = $pg->open_stream('w');
	is($over->status, 503, "round $round: connection " . ($max + 1) . " gets 503");
	like($over->header('retry-after') // '', qr/^\d+$/, "round $round: with Retry-After");
	$over->close;
	$_->close for @$ok;
	ok(wait_rows(0), "round $round: all closed");
}

# ---- B. a stopped worker gives its places back -------------------------------------------
{
	my ($ok) = fill();
	is(scalar(@$ok), $max, 'B: node full again');
	ok(wait_rows($max), 'B: listed');
	my %on;
	push @{ $on{ worker_of($_) } }, $_ for @$ok;
	my ($victim) = sort { scalar(@{ $on{$b} }) <=> scalar(@{ $on{$a} }) } keys %on;
	my $pid = $pg->safe_psql('postgres',
		"SELECT pid FROM pgbus_stream.workers() WHERE worker = $victim");
	$pg->expect_exit($pid, 1);
	$pg->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	my $gone = 0;
	for my $c (@{ $on{$victim} })
	{
		$gone++ if $c->wait_closed(15); # its stream ended (final chunk or EOF)
	}
	is($gone, scalar @{ $on{$victim} }, "B: the stopped worker's connections closed");
	my @now = $pg->wait_workers(2, exclude => [$pid]);
	is(scalar @now, 2, 'B: the worker is back');
	ok($pg->wait_http_ready, 'B: listening');
	$_->close for @$ok;
	ok(wait_rows(0), 'B: all closed');
	# Its listener is back once connections() shows it serving; fill again.
	my $deadline = time + 20;
	my ($again, $st);
	while (time < $deadline)
	{
		($again, $st) = fill();
		last if @$again == $max;
		$_->close for @$again;
		wait_rows(0);
		sleep 0.2;
	}
	is(scalar(@$again), $max, "B: after the restart the node holds $max again")
	  or diag("statuses: @$st");
	my $over = $pg->open_stream('w');
	is($over->status, 503, 'B: and no more');
	$over->close;
	$_->close for @$again;
	ok(wait_rows(0), 'B: closed');
}

# ---- C. Last-Event-ID across workers -----------------------------------------------------
{
	my @sent;
	my $first = $pg->open_stream('w');
	is($first->status, 200, 'C: first connection');
	my $home = worker_of($first);
	push @sent, $pg->broadcast('w', "c$_") for 1 .. 3;
	ok($first->wait_for_data_events(3, 10), 'C: live on worker ' . $home);
	my @got = map { $_->{data} } $first->data_events;
	my $last = ($first->data_events)[-1]{id};
	$first->close;
	my ($other_seen, $n) = (0, 3);
	for (my $try = 0; $try < 30 && !$other_seen; $try++)
	{
		my @missed = map { "c" . ++$n } 1 .. 2;
		$pg->broadcast('w', $_) for @missed;
		my $c = $pg->open_stream('w', headers => { 'Last-Event-ID' => $last });
		is($c->status, 200, "C: reconnect $try");
		$c->wait_for_data_events(2, 10);
		my @d = map { $_->{data} } $c->data_events;
		is("@d", "@missed", "C: reconnect $try gets exactly what it missed");
		my $w = worker_of($c);
		if ($w ne $home)
		{
			$other_seen = 1;
			my $live = 'c' . ++$n;
			$pg->broadcast('w', $live);
			$c->wait_for_data_events(3, 10);
			@d = map { $_->{data} } $c->data_events;
			is("@d", "@missed $live", "C: live on the other worker ($w) after the move");
		}
		$last = ($c->data_events)[-1]{id} if $c->data_events;
		$c->close;
	}
	ok($other_seen, 'C: a reconnect landed on the other worker');
}

$pg->finish;
done_testing();
