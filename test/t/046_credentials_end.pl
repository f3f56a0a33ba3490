# 046_credentials_end: a connection lasts no longer than its credential
# (issue 26, credentials that end).
#
# A. A JWT's exp was checked only at connect: a stream opened with a token
#    about to expire stayed open for good. Now the connection gets
#    event: pgbus:shutdown, data {"reason":"credential_expired"} when the
#    token expires (exp plus the 30 s of leeway it is accepted with), then
#    its stream ends; the same token is then refused, and a connection with
#    a longer-lived token stays.
# B. pgbus_stream.disconnect(sub => ...) ends every connection of that
#    identity on every worker (two workers here), each with pgbus:shutdown
#    {"reason":"disconnected"}, and returns how many; others stay.
#    disconnect(connection => ...) ends one connection by its connectionId.
#    Bad arguments are refused with a clear error, and PUBLIC may not call it.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use MIME::Base64 qw(encode_base64url);
use Digest::SHA qw(hmac_sha256);
use PgbusNode;

my $JWT = 'credentials-end-secret';
my $pg = PgbusNode->new('credend', conf => "pgbus_stream.workers = 2\npgbus_stream.jwt_secret = '$JWT'\n");
ok($pg->wait_workers(2), 'two workers');
$pg->create_stream('room', public => 0);
$pg->create_stream('open');

sub q1 { return $pg->safe_psql('postgres', $_[0]) }

sub jwt
{
	my ($exp, $sub) = @_;
	my $input = encode_base64url('{"alg":"HS256","typ":"JWT"}') . '.'
	  . encode_base64url(qq({"streams":["room","open"],"exp":$exp) . (defined $sub ? qq(,"sub":"$sub") : '') . '}');
	return "$input." . encode_base64url(hmac_sha256($input, $JWT));
}

sub connect_with
{
	my ($token, $path, $what) = @_;
	my $c = $pg->sse($path, headers => { Authorization => "Bearer $token" });
	is($c->status, 200, "$what: 200");
	$c->wait_for_events(1, 10);
	return $c;
}

sub shutdown_reason
{
	my ($c) = @_;
	my ($e) = grep { ($_->{event} // '') eq 'pgbus:shutdown' } $c->events;
	return $e ? $e->{data} : undef;
}

# ---- A. expiry ------------------------------------------------------------------
{
	# Past its exp but within the leeway: accepted now, over in about 5 s.
	my $exp = int(time) - 25;
	my $short = jwt($exp, 'eve');
	my $long = jwt(int(time) + 3600, 'frank');
	my $c = connect_with($short, '/streams/room', 'a token 5 s from the end of its leeway');
	my $p = connect_with($short, '/streams/open', '... on a public stream too');
	my $stay = connect_with($long, '/streams/room', 'a token valid for an hour');
	ok($c->wait_closed(20), 'the stream ends when the credential expires');
	my $at = time - ($exp + 30);
	ok($at > -1 && $at < 7, sprintf('... at its expiry (%.1f s after exp + leeway)', $at));
	is(shutdown_reason($c), '{"reason":"credential_expired"}', '... after pgbus:shutdown saying why');
	ok($p->wait_closed(5), 'the public stream opened with it ends too');
	is(shutdown_reason($p), '{"reason":"credential_expired"}', '... saying why');
	my $again = $pg->sse('/streams/room', headers => { Authorization => "Bearer $short" });
	is($again->status, 401, 'the expired token is then refused');
	$again->close;
	$pg->broadcast('room', 'still here');
	ok($stay->wait_for_data_events(1, 10), 'the connection with a valid token stays and gets messages');
	ok(!$stay->closed, '... and is open');
	$stay->close;
	$c->close;
	$p->close;
}

# ---- B. disconnect() --------------------------------------------------------------
my $alice = jwt(int(time) + 3600, 'alice');
my $bob = jwt(int(time) + 3600, 'bob');
my @alices = map { connect_with($alice, $_ % 2 ? '/streams/room' : '/streams/open', "alice #$_") } 1 .. 6;
my $b1 = connect_with($bob, '/streams/room', 'bob');
my $anon = $pg->sse('/streams/open');
$anon->wait_for_events(1, 10);
sleep 0.6; # connections() is refreshed twice a second
note('connections on ' . q1(q{SELECT count(DISTINCT worker) FROM pgbus_stream.connections()}) . ' worker(s)');

is(q1(q{SELECT pgbus_stream.disconnect(sub => 'alice')}), '6', 'disconnect(sub => alice) ends her 6 connections');
for my $i (0 .. $#alices)
{
	ok($alices[$i]->wait_closed(5), "alice #" . ($i + 1) . " ended");
	is(shutdown_reason($alices[$i]), '{"reason":"disconnected"}', '... after pgbus:shutdown (disconnected)');
}
is(q1(q{SELECT pgbus_stream.disconnect(sub => 'alice')}), '0', 'again: none left');
$pg->broadcast('room', 'for bob');
$pg->broadcast('open', 'for everyone');
ok($b1->wait_for_data_events(1, 10) && !$b1->closed, 'bob stays connected');
ok($anon->wait_for_data_events(1, 10) && !$anon->closed, 'so does an anonymous reader');

my ($connected) = grep { ($_->{event} // '') eq 'pgbus:connected' } $b1->events;
my ($bob_id) = ($connected->{data} // '') =~ /"connectionId":"([0-9a-f]{16})"/;
ok($bob_id, "bob's connection id ($bob_id)");
is(q1(qq{SELECT pgbus_stream.disconnect(connection => '$bob_id')}), '1', 'disconnect(connection => id) ends one');
ok($b1->wait_closed(5), '... bob\'s');
is(shutdown_reason($b1), '{"reason":"disconnected"}', '... saying why');
is(q1(qq{SELECT pgbus_stream.disconnect(connection => '$bob_id')}), '0', 'an id no longer connected: 0');
ok(!$anon->closed, 'the anonymous reader is still there');
$anon->close;

# Bad arguments, privileges.
for my $case ([ 'SELECT pgbus_stream.disconnect()', qr/takes either sub or connection/ ],
	[ q{SELECT pgbus_stream.disconnect(sub => 'a', connection => '0123456789abcdef')}, qr/takes either sub or connection/ ],
	[ q{SELECT pgbus_stream.disconnect(connection => 'nope')}, qr/invalid connection id/ ],
	[ q{SELECT pgbus_stream.disconnect(sub => 'a b')}, qr/invalid sub/ ])
{
	my ($rc, $out, $err) = $pg->psql('postgres', $case->[0]);
	like($err, $case->[1], "refused: $case->[0]");
}
q1('CREATE ROLE plain LOGIN; GRANT USAGE ON SCHEMA pgbus_stream TO plain');
my ($rc, $out, $err) = $pg->psql('postgres', q{SELECT pgbus_stream.disconnect(sub => 'bob')},
	extra_params => [ '-U', 'plain' ]);
like($err, qr/permission denied for function disconnect/, 'PUBLIC may not call disconnect()');

$pg->finish;
done_testing();
