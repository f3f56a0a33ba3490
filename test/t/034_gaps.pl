# 034_gaps: where data is really gone, the client is told; elsewhere it keeps
# receiving.
#
# 4. A durable subscriber's stored cursor never freezes: after its socket
#    stalled through a burst, the cursor stored for it reaches the last id
#    it read.
# 5. Ephemeral broadcasts lost to a ring overrun (their transaction was too
#    large for the ring) are announced with a gap notice.
# 6. A connection on ten streams with long names keeps receiving (its token
#    names streams by epoch, not by name) and resumes with its last id.
# 7. Retention gap notices come from whichever worker serves the reconnect.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

sub datas { return map { $_->{data} // '' } $_[0]->data_events }
sub gaps { return grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $_[0]->events }

my $pg = PgbusNode->new('gaps', conf => qq{
pgbus_stream.ring_size = 64kB
pgbus_stream.workers = 2
pgbus_stream.retention_interval = 1
pgbus_stream.cursor_flush_interval = 100
pgbus_stream.queue_max_events = 50
});

# ---- 4. the stored cursor follows the socket ----------------------------------
{
	$pg->create_stream('durable');
	my $c = $pg->open_stream('durable', query => 'subscriber=alice');
	# A burst far beyond the queue bound while alice does not read.
	$pg->safe_psql('postgres', join('', map { "SELECT pgbus_stream.broadcast('durable', 'd$_ ' || repeat('x', 3000));\n" } 1 .. 400));
	sleep 1;
	ok($c->wait_for_data_events(400, 60), 'subscriber: all 400 arrive once it reads');
	is(scalar(gaps($c)), 0, 'subscriber: no gap');
	my $last = ($c->data_events)[-1]{id};
	my $stored = '';
	my $deadline = time + 10;
	while (time < $deadline)
	{
		$stored = $pg->safe_psql('postgres', q{SELECT cursor FROM pgbus_stream.subscribers WHERE id = 'alice'});
		last if $stored eq $last;
		sleep 0.2;
	}
	is($stored, $last, 'subscriber: the stored cursor reaches the last id read');
	$c->close;
	$pg->broadcast('durable', 'later');
	my $r = $pg->open_stream('durable', query => 'subscriber=alice');
	ok($r->wait_for_data_events(1, 10), 'subscriber: resuming from the stored cursor');
	is_deeply([ datas($r) ], ['later'], 'subscriber: only what came after');
	$r->close;
}

# ---- 5. ephemeral broadcasts lost to an overrun are announced ------------------
{
	$pg->create_stream('eph');
	my $c = $pg->open_stream('eph');
	$pg->broadcast('eph', 'before');
	ok($c->wait_for_data_events(1, 10), 'overrun: first message');
	# One transaction: an ephemeral broadcast and far more than half the
	# 64 kB ring of durable rows (1 000 records of 56 bytes at least): the
	# producer skips the ring.
	$pg->safe_psql('postgres', q{BEGIN;
		SELECT pgbus_stream.broadcast('eph', 'lost ephemeral', durable => false);
		SELECT pgbus_stream.broadcast('eph', 'row ' || g || repeat('y', 200)) FROM generate_series(1, 1000) g;
		COMMIT;});
	$pg->broadcast('eph', 'after');
	ok($c->wait_until(sub { grep { ($_->{data} // '') eq 'after' } $_[0]->events }, 20), 'overrun: later messages arrive');
	my @g = gaps($c);
	ok(scalar(@g), 'overrun: a gap notice came')
	  or diag(join(' | ', map { defined $_->{id} ? substr($_->{data}, 0, 12) : $_->{event} } ($c->events)[0 .. 4]));
	like($g[0]{data} // '', qr/"reason":"ephemeral-overrun","lost":1,"resume":"[^"]+"/, 'overrun: it says one ephemeral broadcast was lost');
	is(scalar(grep { /^row / } datas($c)), 1000, 'overrun: the durable rows came from the table');
	ok(!grep({ $_ eq 'lost ephemeral' } datas($c)), 'overrun: (the ephemeral broadcast did skip the ring)');
	$c->close;
}

# ---- 6. many long stream names on one connection -------------------------------
{
	my @names = map { sprintf('a_rather_long_stream_name_for_tests_n%02d', $_) } 1 .. 10;
	$pg->create_stream($_) for @names;
	my $path = '/streams?' . join('&', map { "stream=$_" } @names);
	my $c = $pg->sse($path);
	is($c->status, 200, 'long names: 200');
	$c->wait_for_events(1, 10);
	$pg->broadcast($_, "m-$_") for @names;
	ok($c->wait_for_data_events(10, 10), 'long names: one message of each of the ten streams arrives');
	my $last = ($c->data_events)[-1]{id} // '';
	cmp_ok(length($last), '<', 256, "long names: the token stays short ($last)");
	$c->close;
	$pg->broadcast($names[3], 'missed');
	my $r = $pg->sse($path, headers => { 'Last-Event-ID' => $last });
	ok($r->wait_for_data_events(1, 10), 'long names: resuming with the last id');
	$r->poll(0.3);
	is_deeply([ datas($r) ], ['missed'], 'long names: exactly what was missed');
	$r->close;
}

# ---- 7. retention notices from any worker -------------------------------------
{
	$pg->create_stream('ret');
	my $first = $pg->broadcast('ret', 'old 1');
	my $old_cursor = $pg->safe_psql('postgres', q{SELECT id FROM pgbus_stream.streams WHERE name = 'ret'}) . '~' . $first;
	$pg->broadcast('ret', "old $_") for 2 .. 5;
	$pg->safe_psql('postgres', q{SELECT pgbus_stream.set_retention('ret', NULL, 2)});
	my $deadline = time + 20;
	sleep 0.2 until time > $deadline
	  || $pg->safe_psql('postgres', q{SELECT retention_floor FROM pgbus_stream.streams WHERE name = 'ret'}) >= $first + 2;
	my $told = 0;
	for my $i (1 .. 12)
	{
		my $c = $pg->sse('/streams/ret', headers => { 'Last-Event-ID' => $old_cursor });
		$c->wait_for_data_events(2, 10);
		$told++ if grep { ($_->{data} // '') =~ /"reason":"retention","oldest":\d+/ } gaps($c);
		$c->close;
	}
	my $served = $pg->safe_psql('postgres',
		q{SELECT count(DISTINCT worker) FROM pgbus_stream.diagnostics() WHERE event = 'subscribed' AND stream = 'ret'});
	is($served, 2, 'retention: both workers served some of the reconnects');
	is($told, 12, 'retention: every reconnect with an old cursor is told, whichever worker took it');
}

$pg->finish;
done_testing();
