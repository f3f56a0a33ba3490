# 065_unknown_names: refusing unknown stream names costs no catalog query.
#
# workers().catalog_reads counts the worker's catalog queries. A burst of
# requests for made-up names without a credential is refused (401) with no
# catalog query at all: every public stream is in the catalog the worker
# loaded whole. Names asked with a credential are read once, then
# remembered as unknown (pgbus_stream.negative_cache_size). A stream created
# afterwards (create_stream, or pgmq.create for the gem) is found at once:
# both move a catalog counter that makes the worker forget what it knew to
# be unknown.
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

my $JWT = 'unknown-names-jwt';
my $pg = PgbusNode->new('unknown', extension => 0, conf => "pgbus_stream.jwt_secret = '$JWT'\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
$pg->create_stream('live', public => 1);

sub q1 { return $pg->safe_psql('postgres', $_[0]) }
# undef where workers() has no such column (a build that does not count them)
sub reads
{
	my ($rc, $out) = $pg->psql('postgres', 'SELECT sum(catalog_reads) FROM pgbus_stream.workers()');
	return $rc == 0 ? $out : undef;
}

sub jwt
{
	my ($streams) = @_;
	my $input = encode_base64url('{"alg":"HS256","typ":"JWT"}') . '.'
	  . encode_base64url('{"streams":[' . join(',', map { qq{"$_"} } @$streams)
		  . '],"exp":' . (int(time) + 3600) . '}');
	return "$input." . encode_base64url(hmac_sha256($input, $JWT));
}

sub status_of
{
	my ($path, %opt) = @_;
	my $c = $pg->sse($path, %opt);
	my $st = $c->status;
	$c->close;
	return $st;
}

# The catalog of this version is loaded once the stream is served; a live
# subscriber meanwhile keeps receiving.
my $live = $pg->open_stream('live');
is($live->status, 200, 'a live subscriber');

my $before = reads();
my %st;
$st{ status_of("/streams/made_up_$_") }++ for 1 .. 300;
is_deeply(\%st, { 401 => 300 }, '300 made-up names without a credential: 401 each');
is(defined $before ? reads() - $before : undef, 0, 'and not one catalog query for them');
$pg->broadcast('live', 'still here');
ok($live->wait_for_data_events(1, 10), 'the live subscriber got its message meanwhile');

# With a credential: one query per distinct name, then none.
my $token = jwt(['room_*']);
$before = reads();
%st = ();
for my $i (1 .. 100)
{
	$st{ status_of('/streams/other_' . ($i % 5), headers => { Authorization => "Bearer $token" }) }++;
}
is_deeply(\%st, { 403 => 100 }, '100 requests for 5 unknown names the JWT does not cover: 403');
my $cached = defined $before ? reads() - $before : 1e9;
cmp_ok($cached, '<=', 5, "at most one catalog query per name ($cached)");

# Waiting subscriptions for a name asked again and again: read once.
$before = reads();
for (1 .. 20)
{
	my $c = $pg->sse('/streams/room_late', headers => { Authorization => "Bearer $token" });
	$c->wait_for_events(1, 5);
	$c->close;
}
cmp_ok(defined $before ? reads() - $before : 1e9, '<=', 1, 'a name awaited 20 times: at most one catalog query');

# Created afterwards: found at once.
q1(q{SELECT pgbus_stream.create_stream('made_up_7', public => true)});
is(status_of('/streams/made_up_7'), 200, 'create_stream: a name refused before is served at once');
q1(q{SELECT pgbus_stream.create_stream('other_3', public => true)});
is(status_of('/streams/other_3', headers => { Authorization => "Bearer $token" }),
	200, 'create_stream: a name remembered as unknown is served at once');
q1(q{SELECT pgmq.create('pgbus_room_late')});
my $c = $pg->sse('/streams/room_late', headers => { Authorization => "Bearer $token" });
is($c->status, 200, 'pgmq.create: the gem\'s stream is served at once');
$c->wait_for_events(1, 5);
like($c->body, qr/^: pgbus stream open since_id=\d+~\d+ stream=room_late$/m,
	'as a stream that exists (its position has an epoch), not one still awaited');
$c->close;

$live->close;
$pg->finish;
done_testing();
