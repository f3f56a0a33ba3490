# 041_privileges: least privilege in SQL. A role with only USAGE on the
# schema cannot broadcast, cannot put the capture trigger on a table of its
# own, cannot read connections, diagnostics, the catalog or the secrets; a
# role with INSERT on a stream's queue can broadcast to that stream only;
# monitoring roles see the live figures; the capture trigger refuses a stream
# id that is not its table's; SECURITY DEFINER functions pin search_path.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode;

my $pg = PgbusNode->new('priv', conf => "pgbus_stream.jwt_secret = 'k'\n");
$pg->create_stream('chat');
$pg->create_stream('other');
$pg->safe_psql(
	'postgres', q{
CREATE ROLE usage_only LOGIN;
CREATE ROLE publisher LOGIN;
CREATE ROLE watcher LOGIN;
CREATE ROLE monitor LOGIN;
GRANT USAGE ON SCHEMA pgbus_stream TO usage_only, publisher, watcher;
GRANT INSERT ON pgbus_stream.q_pgbus_chat TO publisher;
GRANT pg_monitor TO watcher;
GRANT pgbus_stream_monitor TO monitor;
CREATE SCHEMA mine AUTHORIZATION usage_only;
});

# as runs SQL as a role; returns (ok, stdout, stderr).
sub as
{
	my ($role, $sql) = @_;
	my ($rc, $out, $err) = $pg->psql('postgres', $sql, extra_params => [ '-U', $role ]);
	return ($rc == 0, $out, $err);
}

sub refused
{
	my ($role, $sql, $re, $what) = @_;
	my ($ok, $out, $err) = as($role, $sql);
	ok(!$ok && $err =~ $re, $what) or diag("stdout: $out\nstderr: $err");
}

my $c = $pg->sse('/streams/chat');
$c->wait_for_events(1, 10);

# ---- a role with only USAGE ------------------------------------------------------
refused('usage_only', q{SELECT pgbus_stream.broadcast('chat', 'x')}, qr/permission denied to broadcast/,
	'USAGE only: broadcast refused');
refused('usage_only', q{SELECT pgbus_stream.broadcast('chat', 'x', durable => false)},
	qr/permission denied to broadcast/, 'USAGE only: ephemeral broadcast refused');
my $chat_id = $pg->safe_psql('postgres', q{SELECT id FROM pgbus_stream.streams WHERE name = 'chat'});
refused('usage_only', qq{SELECT pgbus_stream._publish($chat_id, 'pgbus_stream.q_pgbus_chat', 'x', NULL, NULL, NULL)},
	qr/permission denied/, 'USAGE only: _publish() directly refused');
refused('usage_only', qq{CREATE TABLE mine.q (msg_id bigint GENERATED ALWAYS AS IDENTITY, message jsonb);
	CREATE TRIGGER t AFTER INSERT ON mine.q REFERENCING NEW TABLE AS n FOR EACH STATEMENT
	EXECUTE FUNCTION pgbus_stream._capture('$chat_id')},
	qr/permission denied for function pgbus_stream._capture/, 'USAGE only: _capture() cannot be put on a table');
for my $fn (qw(connections diagnostics stats alerts workers))
{
	refused('usage_only', "SELECT * FROM pgbus_stream.$fn()", qr/permission denied for function/,
		"USAGE only: $fn() refused");
}
for my $t (qw(streams subscribers stream_stats audiences))
{
	refused('usage_only', "SELECT * FROM pgbus_stream.$t", qr/permission denied for table/,
		"USAGE only: catalog table $t refused");
}
refused('usage_only', q{SELECT current_setting('pgbus_stream.jwt_secret')}, qr/must be superuser|privileges/,
	'USAGE only: jwt_secret unreadable');
refused('usage_only', q{SELECT pgbus_stream.sign_token(ARRAY['*'], '1 hour')}, qr/permission denied/,
	'USAGE only: sign_token refused');
refused('usage_only', q{SELECT pgbus_stream.define_audience('x', '$.a')}, qr/permission denied/,
	'USAGE only: define_audience refused');
refused('usage_only', q{SELECT pgbus_stream.create_stream('mine_stream')}, qr/permission denied/,
	'USAGE only: create_stream refused');

# ---- a publisher with INSERT on one queue ----------------------------------------
my ($ok, $out, $err) = as('publisher', q{SELECT pgbus_stream.broadcast('chat', 'from publisher')});
ok($ok, 'INSERT on the queue: broadcast works') or diag($err);
($ok, $out, $err) = as('publisher', q{SELECT pgbus_stream.broadcast('chat', 'ephemeral from publisher', durable => false)});
ok($ok, 'INSERT on the queue: ephemeral broadcast works') or diag($err);
$c->wait_for_data_events(2, 10);
is(join('|', map { $_->{data} } $c->data_events), 'from publisher|ephemeral from publisher',
	'both reach the subscriber');
refused('publisher', q{SELECT pgbus_stream.broadcast('other', 'x')}, qr/permission denied to broadcast/,
	'INSERT on chat only: broadcast to other refused');
my $other_id = $pg->safe_psql('postgres', q{SELECT id FROM pgbus_stream.streams WHERE name = 'other'});
refused('publisher', qq{SELECT pgbus_stream._publish($other_id, 'pgbus_stream.q_pgbus_chat', 'x', NULL, NULL, NULL)},
	qr/is not the stream of table/, '_publish with another stream\'s id refused');

# ---- monitoring roles ----------------------------------------------------------------
for my $role (qw(watcher monitor))
{
	($ok, $out, $err) = as($role, q{SELECT count(*) FROM pgbus_stream.connections()});
	ok($ok && $out >= 1, "$role (pg_monitor / pgbus_stream_monitor) lists connections") or diag($err);
	($ok, $out, $err) = as($role, q{SELECT count(*) >= 0 FROM pgbus_stream.diagnostics()});
	ok($ok, "$role reads diagnostics()") or diag($err);
	($ok, $out, $err) = as($role, q{SELECT stream FROM pgbus_stream.stats() WHERE stream = 'chat'});
	ok($ok && $out eq 'chat', "$role reads stats()") or diag($err);
}

# ---- the capture trigger checks its stream id ----------------------------------------
$pg->safe_psql('postgres', q{CREATE TABLE public.fake (msg_id bigint GENERATED ALWAYS AS IDENTITY, message jsonb)});
$pg->safe_psql('postgres', qq{CREATE TRIGGER t AFTER INSERT ON public.fake REFERENCING NEW TABLE AS n
	FOR EACH STATEMENT EXECUTE FUNCTION pgbus_stream._capture('$chat_id')});
($ok, $out, $err) = $pg->psql('postgres', q{INSERT INTO public.fake (message) VALUES ('{"html":"poison"}')});
like($err, qr/is not the stream of table fake/, 'a capture trigger with another table\'s stream id is refused');
$c->poll(0.5);
ok(!grep({ $_->{data} eq 'poison' } $c->data_events), 'nothing reached the stream');

# ---- SECURITY DEFINER functions pin search_path, pg_temp last -------------------------
my $bad = $pg->safe_psql(
	'postgres', q{
SELECT coalesce(string_agg(p.proname, ','), '') FROM pg_proc p
  JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pgbus_stream'
 WHERE p.prosecdef
   AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)});
is($bad, '', 'every SECURITY DEFINER function sets search_path = pg_catalog, pg_temp');
is($pg->safe_psql('postgres', q{SELECT prosecdef FROM pg_proc WHERE oid = 'pgbus_stream.broadcast'::regproc}),
	'f', 'broadcast runs with the caller\'s rights (it was SECURITY DEFINER)');

# ---- the upgrade script ends where the install script does ------------------------------
$pg->safe_psql('postgres', q{CREATE DATABASE up});
$pg->safe_psql('up', q{CREATE EXTENSION pgbus_stream VERSION '0.1.0'; ALTER EXTENSION pgbus_stream UPDATE});
my $objects = q{SELECT string_agg(line, E'\n' ORDER BY line) FROM (
  SELECT pg_describe_object(classid, objid, 0) || ' ' ||
	coalesce((SELECT coalesce(array_to_string(proacl, ','), '') || ' ' || coalesce(array_to_string(proconfig, ','), '')
	            || ' ' || pg_get_function_arguments(oid) || ' ' || md5(prosrc)
	            FROM pg_proc WHERE oid = objid AND classid = 'pg_proc'::regclass),
	         (SELECT coalesce(array_to_string(relacl, ','), '') FROM pg_class WHERE oid = objid AND classid = 'pg_class'::regclass), '') AS line
  FROM pg_depend WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pgbus_stream') AND deptype = 'e') x};
is($pg->safe_psql('up', $objects), $pg->safe_psql('postgres', $objects), 'upgraded 0.1.0 has the objects and grants of the current version');
is($pg->safe_psql('up', q{SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef
	WHERE adrelid = 'pgbus_stream.streams'::regclass AND adnum = (SELECT attnum FROM pg_attribute
	WHERE attrelid = 'pgbus_stream.streams'::regclass AND attname = 'public')}), 'false',
	'upgraded catalog: streams are private by default');

$c->close;
$pg->finish;
done_testing();
