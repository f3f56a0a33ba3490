# 022_admin: the operators' routes (/, /stats.json, /metrics, /healthz) can
# require a bearer token, set and changed by SIGHUP; streams never need it.
# admin_loopback_only refuses them to a client that connects from one of the
# host's own non-loopback addresses (the listener binds it too; the traffic
# never leaves the host), and serves them over 127.0.0.1 and ::1.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode;

# A non-loopback address of this host (PGBUS_TEST_NONLOOPBACK_ADDR, else the
# first global one `ip` lists). Without one the refusal cannot be tried: fail.
sub nonloopback_addr
{
	return $ENV{PGBUS_TEST_NONLOOPBACK_ADDR} if $ENV{PGBUS_TEST_NONLOOPBACK_ADDR};
	my ($ip) = grep { -x } qw(/usr/sbin/ip /sbin/ip /usr/bin/ip /bin/ip);
	return undef unless $ip;
	for (split /\n/, `$ip -o -4 addr show scope global 2>/dev/null`)
	{
		return $1 if m{\binet (\d+\.\d+\.\d+\.\d+)/};
	}
	return undef;
}
my $other = nonloopback_addr();
my $pg = PgbusNode->new('admin',
	conf => "pgbus_stream.listen_addresses = '127.0.0.1,::1" . ($other ? ",$other" : '') . "'\n");
$pg->create_stream('pub');

sub status_of
{
	my ($path, %opt) = @_;
	my $c = $pg->sse($path, %opt);
	my $st = $c->status;
	$c->close;
	return $st;
}

is(status_of('/metrics'), 200, 'no token configured: /metrics open');

$pg->safe_psql('postgres', q{ALTER SYSTEM SET pgbus_stream.admin_token = 's3cret-token'; SELECT pg_reload_conf();});
my $deadline = time + 10;
sleep 0.2 while status_of('/metrics') != 401 && time < $deadline;
for my $path ('/', '/stats.json', '/metrics', '/healthz')
{
	is(status_of($path), 401, "$path without the token: 401");
	is(status_of($path, headers => { Authorization => 'Bearer wrong' }), 401, "$path with a wrong token: 401");
	is(status_of($path, headers => { Authorization => 'Bearer s3cret-token' }), 200, "$path with the bearer token: 200");
}
is(status_of('/metrics?token=s3cret-token'), 200, '?token= works too');
{
	my $c = $pg->sse('/metrics');
	is($c->header('www-authenticate'), 'Bearer', '401 names the Bearer scheme');
	$c->close;
}
my $c = $pg->open_stream('pub');
is($c->status, 200, 'streams need no admin token');
$c->close;
is(status_of('/viewer?stream=pub'), 200, 'the viewer needs no admin token');
is($pg->safe_psql('postgres', q{SELECT count(*) FROM pg_settings WHERE name = 'pgbus_stream.admin_token'}), 0,
	'the token is not listed in pg_settings');

$pg->safe_psql('postgres',
	q{ALTER SYSTEM RESET pgbus_stream.admin_token; ALTER SYSTEM SET pgbus_stream.admin_loopback_only = on; SELECT pg_reload_conf();});
$deadline = time + 10;
sleep 0.2 while status_of('/metrics') != 200 && time < $deadline;
is(status_of('/metrics'), 200, 'loopback only: a loopback client is served, no token needed after reset');
is(status_of('/metrics', host => '::1'), 200, 'loopback only: a client on ::1 is served');
ok($other, 'this host has a non-loopback address to connect from (' . ($other // 'none') . ')')
  or diag('set PGBUS_TEST_NONLOOPBACK_ADDR to one of the host\'s own addresses');
if ($other)
{
	for my $path ('/', '/stats.json', '/metrics', '/healthz')
	{
		is(status_of($path, host => $other), 403, "loopback only: $path from $other: 403");
	}
	my $c = $pg->open_stream('pub', host => $other);
	is($c->status, 200, "loopback only: streams are still served to $other");
	$c->close;
}

$pg->finish;
done_testing();
