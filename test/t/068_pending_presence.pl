# 068_pending_presence: presence of subscriptions that waited for their
# stream (subscribed before the gem created its queue).
#
# A ?presence=1 connection and a plain one wait for a queue that does not
# exist yet. Once it is created and sent to, both get the message, the
# presence connection gets the new stream's snapshot (both identities),
# presence() counts both, and a leave follows when the other one goes.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(sql_literal);

my $pg = PgbusNode->new(
	'pendpresence',
	extension => 0,
	conf => "pgbus_stream.jwt_secret = 'pending-presence-secret'\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
ok($pg->wait_workers(1), 'the worker runs');

sub q1 { return $pg->safe_psql('postgres', $_[0]) }
sub token { return q1("SELECT pgbus_stream.sign_token(ARRAY['room_9*'], '1 hour', " . sql_literal($_[0]) . ')') }

sub presence_frames
{
	my ($c) = @_;
	return map { decode_json($_->{data}) } grep { ($_->{event} // '') eq 'pgbus:presence' } $c->events;
}

my $watch = $pg->sse('/streams/room_9_a?presence=1', headers => { Authorization => 'Bearer ' . token('alice') });
is($watch->status, 200, 'presence: 200 before the queue exists');
$watch->wait_for_events(1, 10);
my $other = $pg->sse('/streams/room_9_a', headers => { Authorization => 'Bearer ' . token('bob') });
is($other->status, 200, 'a second one waits too');
$other->wait_for_events(1, 10);
my $nosub = $pg->sse('/streams/room_9_a?presence=1', headers => { Authorization => 'Bearer ' . token('alice') });
is($nosub->status, 200, 'another presence connection waits');
$nosub->wait_for_events(1, 10);
$nosub->close;

q1(q{SELECT pgmq.create('pgbus_room_9_a')});
q1(q{SELECT pgmq.send('pgbus_room_9_a', '{"html": "first"}')});
ok($watch->wait_for_data_events(1, 10) && $other->wait_for_data_events(1, 10), 'both get the first message');

ok(
	$watch->wait_until(
		sub {
			grep { $_->{stream} eq 'room_9_a' && $_->{action} eq 'snapshot' && @{ $_->{members} } == 2 }
			  presence_frames($_[0]);
		},
		10),
	'presence: a snapshot of the born stream with both identities'
) or diag(explain([ presence_frames($watch) ]));
my ($snap) = grep { $_->{action} eq 'snapshot' && @{ $_->{members} } == 2 } presence_frames($watch);
is_deeply([ sort map { "$_->{sub}:$_->{count}" } @{ $snap->{members} // [] } ], [ 'alice:1', 'bob:1' ],
	'presence: alice and bob, once each');

my $rows = '';
my $deadline = time + 10;
while (time < $deadline)
{
	$rows = q1(q{SELECT string_agg(sub || ':' || connections, ',' ORDER BY sub) FROM pgbus_stream.presence('room_9_a')});
	last if $rows eq 'alice:1,bob:1';
	sleep 0.1;
}
is($rows, 'alice:1,bob:1', 'presence() counts both');

$other->close;
ok(
	$watch->wait_until(
		sub {
			grep { ($_->{action} // '') eq 'leave' && ($_->{sub} // '') eq 'bob' && $_->{count} == 0 }
			  presence_frames($_[0]);
		},
		10),
	'presence: bob leaves'
);
$watch->close;

$pg->finish;
done_testing();
