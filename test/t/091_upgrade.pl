# 091_upgrade: ALTER EXTENSION pgbus_stream UPDATE on a database made with
# 0.1.0, on a server running the current library.
#
# Steps: install 0.1.0 from its frozen script; make streams of each kind
# (create_stream, one with retention, an attached PGMQ-layout queue), a
# durable subscriber with a stored cursor, a reader holding a token, a live
# connection, and messages; call every 0.1.0 SQL function the library backs;
# update; then the live connection keeps streaming, the subscriber and the
# token resume with exactly what they missed (also after a restart), ids and
# settings are unchanged, and new streams work. Last, the extension's schema
# objects in the updated database (functions with signatures, attributes,
# bodies and ACLs; tables, columns, constraints, indexes, triggers, policies,
# sequences, config-dump registrations) must equal those of a fresh install
# of default_version, and the triggers (one, enabled ALWAYS) and queue tables
# of streams made before the update must equal those of a stream made after
# it. Every other version shipped must update to the same objects from an
# empty database.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new('upgrade', start => 0, conf => "pgbus_stream.cursor_flush_interval = 50\n");
$pg->start;
$pg->safe_psql('postgres', q{CREATE EXTENSION pgbus_stream VERSION '0.1.0'});
ok($pg->wait_http_ready, 'listener up');
my $target = $pg->safe_psql('postgres',
	q{SELECT default_version FROM pg_available_extensions WHERE name = 'pgbus_stream'});
is($pg->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'pgbus_stream'}),
	'0.1.0', 'installed 0.1.0 from its script');
isnt($target, '0.1.0', "default_version $target is newer than 0.1.0");

sub datas { return map { $_->{data} } $_[0]->data_events }
sub last_id { my @d = $_[0]->data_events; return @d ? $d[-1]{id} : undef }

sub stored_cursor
{
	my ($id, $stream) = @_;
	return $pg->safe_psql('postgres',
		"SELECT cursor FROM pgbus_stream.subscribers WHERE id = '$id' AND stream = '$stream'");
}

# wait_stored waits until the workers have stored $want as the cursor of
# subscriber $id on $stream.
sub wait_stored
{
	my ($id, $stream, $want) = @_;
	my $deadline = time + 10;
	my $got = '';
	while (time < $deadline)
	{
		$got = stored_cursor($id, $stream);
		return $got if $got eq $want;
		sleep 0.05;
	}
	return $got;
}

# ---- a database in use with 0.1.0 ----
my $chat_id = $pg->create_stream('chat');
my $news_id = $pg->create_stream('news');
$pg->safe_psql('postgres', q{SELECT pgbus_stream.set_retention('news', '7 days', 1000)});
$pg->safe_psql('postgres', q{
CREATE SCHEMA pgmq;
CREATE TABLE pgmq.q_pgbus_orders (
    msg_id       bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
    read_ct      integer DEFAULT 0 NOT NULL,
    enqueued_at  timestamptz DEFAULT now() NOT NULL,
    last_read_at timestamptz,
    vt           timestamptz NOT NULL DEFAULT clock_timestamp(),
    message      jsonb,
    headers      jsonb
);
CREATE TABLE pgmq.a_pgbus_orders (LIKE pgmq.q_pgbus_orders INCLUDING DEFAULTS,
                                  archived_at timestamptz DEFAULT now() NOT NULL);
});
my $orders_id = $pg->safe_psql('postgres', q{SELECT id FROM pgbus_stream.attach('pgbus_orders')});
ok(defined $pg->wait_stream_served('orders'), 'attached PGMQ queue served');
my $streams_before = $pg->safe_psql('postgres',
	'SELECT id, name, queue_schema, queue_table, archive_table, kind, public, retention, retention_max '
	  . 'FROM pgbus_stream.streams ORDER BY id');

my $live = $pg->open_stream('chat');
my $alice = $pg->open_stream('chat', query => 'subscriber=alice');
my $reader = $pg->open_stream('orders');
$pg->broadcast('chat', "c$_") for 1 .. 3;
$pg->safe_psql('postgres', q{INSERT INTO pgmq.q_pgbus_orders (message) VALUES ('{"html": "o1"}'), ('{"html": "o2"}')});
ok($alice->wait_for_data_events(3, 10), '0.1.0: subscriber gets c1..c3')
  or diag("the library must serve the 0.1.0 objects until the update; server log:\n"
	  . join('', grep { /worker error|ERROR/ } split /^/, slurp_file($pg->logfile)));
ok($reader->wait_for_data_events(2, 10), '0.1.0: attached queue streams o1, o2');
is(wait_stored('alice', 'chat', last_id($alice)), last_id($alice), '0.1.0: subscriber cursor stored');
my $token = last_id($reader);
$alice->close;
$reader->close;

# The library serves the 0.1.0 declarations of its C functions.
for my $f (qw(stats workers connections diagnostics alerts))
{
	my ($rc, $out, $err) = $pg->psql('postgres', "SELECT count(*) FROM pgbus_stream.$f()");
	is($rc, 0, "0.1.0: pgbus_stream.$f() works with this library") or diag($err);
}
my $subs = '';
for (1 .. 100)
{
	$subs = $pg->safe_psql('postgres', q{SELECT subscribers FROM pgbus_stream.stats() WHERE stream = 'chat'});
	last if $subs eq '1';
	sleep 0.05;
}
is($subs, '1', '0.1.0: stats() counts the live connection');

# Missed by the subscriber and the reader; the live connection is open.
$pg->broadcast('chat', 'c4');
$pg->safe_psql('postgres', q{INSERT INTO pgmq.q_pgbus_orders (message) VALUES ('{"html": "o3"}')});

# ---- update ----
$pg->safe_psql('postgres', 'ALTER EXTENSION pgbus_stream UPDATE');
is($pg->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'pgbus_stream'}),
	$target, "updated to $target");

$pg->broadcast('chat', 'c5');
$pg->safe_psql('postgres', q{INSERT INTO pgmq.q_pgbus_orders (message) VALUES ('{"html": "o4"}')});
ok($live->wait_for_data_events(5, 10), 'a connection open across the update keeps streaming');
is_deeply([ datas($live) ], [qw(c1 c2 c3 c4 c5)], 'live connection: every message once, in order');
$live->close;

$alice = $pg->open_stream('chat', query => 'subscriber=alice');
ok($alice->wait_for_data_events(2, 10), 'subscriber resumes from its 0.1.0 cursor');
$alice->poll(0.3);
is_deeply([ datas($alice) ], [qw(c4 c5)], 'subscriber: exactly what it missed');
is(wait_stored('alice', 'chat', last_id($alice)), last_id($alice), 'subscriber cursor stored after the update');
$alice->close;

$reader = $pg->open_stream('orders', headers => { 'Last-Event-ID' => $token });
ok($reader->wait_for_data_events(2, 10), 'a token from before the update resumes');
$reader->poll(0.3);
is_deeply([ datas($reader) ], [qw(o3 o4)], 'token: exactly what was missed');
$reader->close;

is($pg->safe_psql('postgres',
		'SELECT id, name, queue_schema, queue_table, archive_table, kind, public, retention, retention_max '
		  . 'FROM pgbus_stream.streams ORDER BY id'),
	$streams_before, 'streams keep their ids (cursor epochs) and settings');

my $after_id = $pg->create_stream('after');
my $c = $pg->open_stream('after');
$pg->broadcast('after', 'a1');
ok($c->wait_for_data_events(1, 10), 'a stream made after the update streams');
is_deeply([ datas($c) ], ['a1'], 'new stream: its message');
$c->close;
cmp_ok($after_id, '>', $orders_id, 'new stream ids keep growing');

# ---- restart: everything the worker keeps is read again from the catalog ----
$pg->restart;
ok($pg->wait_http_ready, 'listener up after restart');
$pg->broadcast('chat', 'c6');
$alice = $pg->open_stream('chat', query => 'subscriber=alice');
ok($alice->wait_for_data_events(1, 10), 'after restart: subscriber resumes');
$alice->poll(0.3);
is_deeply([ datas($alice) ], ['c6'], 'after restart: exactly what it missed');
$alice->close;

# ---- schema: updated database == fresh install ----
# One line per object property; objects made at run time (queue tables) are
# not members of the extension and are compared separately below.
my $describe = q{
WITH ext AS (SELECT oid, extnamespace FROM pg_extension WHERE extname = 'pgbus_stream'),
members AS (
  SELECT d.classid, d.objid FROM pg_depend d, ext
   WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
rels AS (SELECT objid AS oid FROM members WHERE classid = 'pg_class'::regclass),
seqs AS (
  SELECT oid FROM rels
  UNION SELECT d.objid FROM pg_depend d JOIN rels r ON d.refobjid = r.oid
   WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))
SELECT line FROM (
  SELECT 'member ' || pg_describe_object(classid, objid, 0) FROM members
  UNION ALL
  SELECT format('function %s | result %s | args %s | kind %s volatile %s strict %s security definer %s leakproof %s parallel %s | language %s | config %s | acl %s | body %s %s',
                p.oid::regprocedure, pg_get_function_result(p.oid), pg_get_function_arguments(p.oid),
                p.prokind, p.provolatile, p.proisstrict, p.prosecdef, p.proleakproof, p.proparallel,
                l.lanname, p.proconfig, p.proacl, md5(p.prosrc), p.probin)
    FROM pg_proc p JOIN members m ON m.classid = 'pg_proc'::regclass AND m.objid = p.oid
    JOIN pg_language l ON l.oid = p.prolang
  UNION ALL
  SELECT format('relation %s kind %s persistence %s row security %s/%s acl %s options %s',
                c.oid::regclass, c.relkind, c.relpersistence, c.relrowsecurity, c.relforcerowsecurity,
                c.relacl, c.reloptions)
    FROM pg_class c JOIN rels USING (oid)
  UNION ALL
  SELECT format('column %s.%s (position %s) %s not null %s default %s identity %s generated %s collation %s acl %s',
                a.attrelid::regclass, a.attname,
                row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum),  -- SELECT * order, holes left out
                format_type(a.atttypid, a.atttypmod), a.attnotnull,
                pg_get_expr(ad.adbin, ad.adrelid), a.attidentity, a.attgenerated, a.attcollation, a.attacl)
    FROM pg_attribute a JOIN rels r ON r.oid = a.attrelid
    LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
   WHERE a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT format('constraint %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
    FROM pg_constraint WHERE conrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT 'trigger ' || pg_get_triggerdef(oid) FROM pg_trigger
   WHERE tgrelid IN (SELECT oid FROM rels) AND NOT tgisinternal
  UNION ALL
  SELECT format('policy %s %s %s permissive %s roles %s using %s check %s', polrelid::regclass, polname,
                polcmd, polpermissive, polroles::regrole[], pg_get_expr(polqual, polrelid),
                pg_get_expr(polwithcheck, polrelid))
    FROM pg_policy WHERE polrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT format('sequence %s %s increment %s min %s max %s cache %s cycle %s', seqrelid::regclass,
                format_type(seqtypid, NULL), seqincrement, seqmin, seqmax, seqcache, seqcycle)
    FROM pg_sequence WHERE seqrelid IN (SELECT oid FROM seqs)
  UNION ALL
  SELECT 'view ' || c.oid::regclass || ' ' || pg_get_viewdef(c.oid) FROM pg_class c JOIN rels USING (oid)
   WHERE c.relkind IN ('v', 'm')
  UNION ALL
  SELECT format('type %s kind %s base %s not null %s', t.oid::regtype, t.typtype,
                format_type(t.typbasetype, t.typtypmod), t.typnotnull)
    FROM pg_type t JOIN members m ON m.classid = 'pg_type'::regclass AND m.objid = t.oid
  UNION ALL
  SELECT format('enum %s %s', enumtypid::regtype, string_agg(enumlabel, ',' ORDER BY enumsortorder))
    FROM pg_enum WHERE enumtypid IN (SELECT objid FROM members WHERE classid = 'pg_type'::regclass)
   GROUP BY enumtypid
  UNION ALL
  SELECT format('domain constraint %s %s', contypid::regtype, pg_get_constraintdef(oid))
    FROM pg_constraint WHERE contypid IN (SELECT objid FROM members WHERE classid = 'pg_type'::regclass)
  UNION ALL
  SELECT format('event trigger %s on %s tags %s runs %s', evtname, evtevent, evttags, evtfoid::regprocedure)
    FROM pg_event_trigger e JOIN members m ON m.classid = 'pg_event_trigger'::regclass AND m.objid = e.oid
  UNION ALL
  SELECT format('comment %s: %s', pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description)
    FROM pg_description d JOIN members m ON m.classid = d.classoid AND m.objid = d.objoid
  UNION ALL
  SELECT format('comment %s: %s', pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description)
    FROM pg_description d WHERE d.classoid = 'pg_class'::regclass AND d.objsubid > 0
     AND d.objoid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT format('schema %s acl %s', n.nspname, n.nspacl) FROM pg_namespace n, ext WHERE n.oid = ext.extnamespace
  UNION ALL
  SELECT format('config dump %s where %s', cfg::regclass, cond)
    FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(cfg, cond) WHERE e.extname = 'pgbus_stream'
) objects(line)
ORDER BY line COLLATE "C"
};

$pg->safe_psql('postgres', 'CREATE DATABASE fresh');
$pg->safe_psql('fresh', 'CREATE EXTENSION pgbus_stream');
is($pg->safe_psql('fresh', q{SELECT extversion FROM pg_extension WHERE extname = 'pgbus_stream'}),
	$target, "fresh database: $target");
my @updated = split /\n/, $pg->safe_psql('postgres', $describe);
my @fresh = split /\n/, $pg->safe_psql('fresh', $describe);
cmp_ok(scalar(grep { /^function / } @fresh), '>=', 20, 'the description lists the functions');
cmp_ok(scalar(grep { /^column / } @fresh), '>=', 20, 'the description lists the columns');
same_lines(\@updated, \@fresh, 'updated database', 'fresh install',
	"schema objects after ALTER EXTENSION UPDATE equal a fresh $target install");

# Every other version shipped updates to the same objects, from an empty
# database too.
for my $v (split /\n/, $pg->safe_psql('postgres',
	"SELECT version FROM pg_available_extension_versions WHERE name = 'pgbus_stream' AND version <> '$target'"))
{
	(my $db = "from_$v") =~ s/\W/_/g;
	$pg->safe_psql('postgres', "CREATE DATABASE $db");
	$pg->safe_psql($db, "CREATE EXTENSION pgbus_stream VERSION '$v'; ALTER EXTENSION pgbus_stream UPDATE");
	same_lines([ split /\n/, $pg->safe_psql($db, $describe) ], \@fresh, "updated from $v", 'fresh install',
		"an empty database made with $v updates to the objects of a fresh $target install");
}

# ---- objects made at run time: streams from before and after the update ----
# A stream's triggers and (for create_stream's queues) its tables, with its
# own names and id replaced, must not depend on when the stream was made.
my $signature = q{
SELECT s.name, t.line FROM pgbus_stream.streams s,
LATERAL (
  SELECT 'trigger ' || pg_get_triggerdef(g.oid) || ' enabled ' || g.tgenabled::text AS line FROM pg_trigger g
   WHERE g.tgrelid = to_regclass(format('%I.%I', s.queue_schema, s.queue_table)) AND NOT g.tgisinternal
  UNION ALL
  SELECT format('column %s %s %s not null %s default %s identity %s', r.kind, a.attname,
                format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(ad.adbin, ad.adrelid), a.attidentity)
    FROM (VALUES ('queue', s.queue_table), ('archive', s.archive_table)) r(kind, tab)
    JOIN pg_attribute a ON a.attrelid = to_regclass(format('%I.%I', s.queue_schema, r.tab))
    LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
   WHERE s.kind = 'builtin' AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT format('constraint %s %s', r.kind, pg_get_constraintdef(c.oid))
    FROM (VALUES ('queue', s.queue_table), ('archive', s.archive_table)) r(kind, tab)
    JOIN pg_constraint c ON c.conrelid = to_regclass(format('%I.%I', s.queue_schema, r.tab))
   WHERE s.kind = 'builtin'
) t
};
my %sig;
for my $row (split /\n/, $pg->safe_psql('postgres', $signature))
{
	my ($name, $line) = split /\|/, $row, 2;
	my ($schema, $queue, $archive, $id) = split /\|/,
	  $pg->safe_psql('postgres',
		"SELECT queue_schema, queue_table, archive_table, id FROM pgbus_stream.streams WHERE name = '$name'");
	$line =~ s/\b\Q$schema.$queue\E\b/<queue>/g;
	$line =~ s/\b\Q$archive\E\b/<archive>/g;
	$line =~ s/\b\Q$queue\E\b/<queue>/g;
	$line =~ s/'\Q$id\E'/<id>/g;
	push @{ $sig{$name} }, $line;
}
$sig{$_} = [ sort @{ $sig{$_} } ] for keys %sig;
is_deeply([ grep { /^trigger / } @{ $sig{after} // [] } ],
	[ 'trigger CREATE TRIGGER pgbus_stream_capture AFTER INSERT ON <queue> FOR EACH ROW '
		  . 'EXECUTE FUNCTION pgbus_stream._capture(<id>) enabled A' ],
	'a new stream has one capture trigger, a row trigger enabled ALWAYS');
for my $old (qw(chat news))
{
	same_lines($sig{$old}, $sig{after}, "stream $old (0.1.0)", "stream after ($target)",
		"stream $old made with 0.1.0 has the triggers and queue tables of a stream made with $target");
}
my @after_triggers = grep { /^trigger / } @{ $sig{after} };
same_lines([ grep { /^trigger / } @{ $sig{orders} } ], \@after_triggers, 'attached orders (0.1.0)',
	"stream after ($target)", 'the attached queue has the triggers of a stream made after the update');

# same_lines compares two sorted lists of lines and names what differs.
sub same_lines
{
	my ($got, $want, $got_name, $want_name, $test) = @_;
	my %g = map { $_ => 1 } @$got;
	my %w = map { $_ => 1 } @$want;
	my @missing = grep { !$g{$_} } @$want;
	my @extra = grep { !$w{$_} } @$got;
	my $ok = ok(!@missing && !@extra && @$got == @$want, $test);
	diag("only in $want_name: $_") for @missing;
	diag("only in $got_name: $_") for @extra;
	return $ok;
}

$pg->finish;
done_testing();
