# 075_owner_views: a queue's owner cannot make the worker (or a superuser
# calling stats()) run its code by turning the queue into something else;
# only a real table of PGMQ's shape is taken as a queue.
#
# A. An application role owns an auto-attached PGMQ queue, empties it of
#    indexes and identity and turns it into a view (a "_RETURN" rule, still
#    possible on PostgreSQL 15; from 16, which refuses that, it renames the
#    table away and makes a view of the queue's name, which the stream finds
#    by name just the same) whose rows call its own function. One
#    authorised request for the stream made the worker read the view as
#    superuser: the function made the role SUPERUSER.
# B. The same with no request at all: a page visit hooked the queue, the
#    owner drops the capture trigger and makes the view, then creates and
#    drops another queue of its own; the catalog reload that follows read
#    the view as superuser.
# C. stats(), called by a superuser, read the view too.
# Now each of these skips the table with a logged reason and runs nothing of
# it. D: attach(), auto-attach and the hook refuse a view,
# a table with rules, a foreign table, a partitioned table with a foreign
# partition, the wrong columns and an archive of another owner, each with a
# clear reason (the auto-attach event trigger does not record another
# role's archive either); a partitioned table of plain partitions is still
# a queue.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new('owner_view', extension => 0, bearer_all => 1);
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
$pg->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
GRANT USAGE, CREATE ON SCHEMA pgmq TO app;
GRANT SELECT, INSERT, DELETE ON pgmq.meta, pgmq.notify_insert_throttle TO app;
CREATE SCHEMA applog AUTHORIZATION app;
});

sub q1 { return $pg->safe_psql('postgres', $_[0]) }

sub as_app
{
	my ($sql) = @_;
	my ($rc, $out, $err) = $pg->psql('postgres', $sql, extra_params => [ '-U', 'app' ]);
	diag("as app: $err") if $rc != 0;
	return $rc == 0 ? $out : undef;
}

sub wait_for
{
	my ($cond, $secs) = @_;
	my $deadline = time + $secs;
	while (time < $deadline)
	{
		return 1 if $cond->();
		sleep 0.2;
	}
	return $cond->();
}

sub superuser_app { return q1(q{SELECT rolsuper FROM pg_roles WHERE rolname = 'app'}) eq 't' }
sub evil_calls    { return q1(q{SELECT count(*) FROM applog.log}) }
sub logged        { my ($re) = @_; return slurp_file($pg->logfile) =~ $re }

# The owner's function: it logs who runs it and tries to make its role
# SUPERUSER (which only a superuser's rights can do).
ok(defined as_app(q{
CREATE TABLE applog.log (at text, who text);
CREATE FUNCTION applog.evil(at text) RETURNS bigint LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO applog.log VALUES (at, current_user);
  BEGIN EXECUTE 'ALTER ROLE app SUPERUSER'; EXCEPTION WHEN OTHERS THEN NULL; END;
  RETURN 1;
END $f$;
}), 'the application role defines its function');

# to_view turns an empty PGMQ queue of the owner into a view calling evil().
my $rule_makes_view = q1('SHOW server_version_num') < 160000;
sub to_view
{
	my ($q, $at) = @_;
	my $rows = qq{SELECT applog.evil('$at') AS msg_id, 0 AS read_ct, now() AS enqueued_at,
         NULL::timestamptz AS last_read_at, now() AS vt, '{"html": "x"}'::jsonb AS message, NULL::jsonb AS headers};
	return as_app(qq{
DROP TRIGGER IF EXISTS pgbus_stream_capture ON pgmq.q_$q;
ALTER TABLE pgmq.q_$q RENAME TO q_${q}_away;
CREATE VIEW pgmq.q_$q AS $rows;
}) if !$rule_makes_view;
	return as_app(qq{
DROP TRIGGER IF EXISTS pgbus_stream_capture ON pgmq.q_$q;
ALTER TABLE pgmq.q_$q DROP CONSTRAINT q_${q}_pkey;
DROP INDEX pgmq.q_${q}_vt_idx;
ALTER TABLE pgmq.q_$q ALTER COLUMN msg_id DROP IDENTITY;
VACUUM pgmq.q_$q; -- clears relhastriggers and relhasindex
CREATE RULE "_RETURN" AS ON SELECT TO pgmq.q_$q DO INSTEAD $rows;
});
}

# ---- A. one authorised request ----------------------------------------------------------
ok(defined as_app(q{SELECT pgmq.create('pgbus_v1')}), 'the owner makes a queue (auto-attached)');
ok(defined to_view('pgbus_v1', 'request'), '... and turns it into a view');
is(q1(q{SELECT relkind FROM pg_class WHERE oid = 'pgmq.q_pgbus_v1'::regclass}), 'v', 'the queue is a view now');
my $c = $pg->sse('/streams/v1', timeout => 5);
ok(wait_for(sub { superuser_app() || logged(qr/pgmq\.q_pgbus_v1 is not a queue table: it is a view/) }, 20),
	'a request for the stream: the worker looks it up');
$c->close;
ok(!superuser_app(), 'A: the owner did not become SUPERUSER');
is(evil_calls(), '0', 'A: the view\'s function never ran') or diag(q1(q{SELECT string_agg(at || ' as ' || who, '; ') FROM applog.log}));
ok(logged(qr/pgmq\.q_pgbus_v1 is not a queue table: it is a view/), 'A: the worker logged why it skips the stream');
q1(q{ALTER ROLE app NOSUPERUSER; TRUNCATE applog.log});

# ---- B. no request: a hooked queue, then the owner drops another queue -------------------
ok(defined as_app(q{SELECT pgmq.create('pgbus_v2')}), 'the owner makes a second queue');
$c = $pg->open_stream('v2');
is($c->status, 200, 'a page visit subscribes to it');
ok(wait_for(sub { q1(q{SELECT hooked FROM pgbus_stream.streams WHERE name = 'v2'}) eq 't' }, 15),
	'... which hooks the queue');
$c->close;
ok(defined to_view('pgbus_v2', 'reload'), 'the owner drops the capture trigger and turns the queue into a view');
ok(defined as_app(q{SELECT pgmq.create('pgbus_other'); SELECT pgmq.drop_queue('pgbus_other')}),
	'... then makes and drops another queue of its own');
ok(wait_for(sub { superuser_app() || logged(qr/pgmq\.q_pgbus_v2 is not a queue table: it is a view/) }, 20),
	'the workers read the catalog again');
ok(!superuser_app(), 'B: the owner did not become SUPERUSER');
is(evil_calls(), '0', 'B: the view\'s function never ran') or diag(q1(q{SELECT string_agg(at || ' as ' || who, '; ') FROM applog.log}));
q1(q{ALTER ROLE app NOSUPERUSER; TRUNCATE applog.log});

# ---- C. stats() as a superuser ------------------------------------------------------------
is(q1(q{SELECT coalesce(oldest_id::text, 'null') FROM pgbus_stream.stats() WHERE stream = 'v2'}), 'null',
	'C: stats() shows no oldest id for a queue that is a view');
ok(!superuser_app(), 'C: stats() by a superuser did not make the owner SUPERUSER');
is(evil_calls(), '0', 'C: ... nor run the view\'s function');

# ---- D. what attach(), auto-attach and the hook refuse --------------------------------------
# (names outside auto_attach's "pgbus_", so that CREATE TABLE does not
# attach them first; create_stream() with PGMQ installed hooks its queue
# through the same _hook() as attach())
my $shape = q{msg_id bigint, read_ct integer, enqueued_at timestamptz, last_read_at timestamptz,
              vt timestamptz, message jsonb, headers jsonb};
q1(qq{
CREATE VIEW pgmq.q_x_aview AS
  SELECT 1::bigint AS msg_id, 0 AS read_ct, now() AS enqueued_at, now() AS vt, '{}'::jsonb AS message;
CREATE TABLE pgmq.q_x_ruled ($shape);
CREATE RULE note AS ON INSERT TO pgmq.q_x_ruled DO ALSO NOTIFY ruled;
CREATE TABLE pgmq.q_x_texty (msg_id bigint, read_ct integer, enqueued_at timestamptz, vt timestamptz, message text);
CREATE TABLE pgmq.q_x_novt (msg_id bigint, read_ct integer, enqueued_at timestamptz, message jsonb);
CREATE FOREIGN DATA WRAPPER nothing;
CREATE SERVER nowhere FOREIGN DATA WRAPPER nothing;
CREATE FOREIGN TABLE pgmq.q_x_far ($shape) SERVER nowhere;
CREATE TABLE pgmq.q_x_fp ($shape) PARTITION BY RANGE (msg_id);
CREATE TABLE pgmq.q_x_fp_1 PARTITION OF pgmq.q_x_fp FOR VALUES FROM (1) TO (100);
CREATE FOREIGN TABLE pgmq.q_x_fp_2 PARTITION OF pgmq.q_x_fp FOR VALUES FROM (100) TO (200) SERVER nowhere;
CREATE TABLE pgmq.q_x_parts ($shape) PARTITION BY RANGE (msg_id);
CREATE TABLE pgmq.q_x_parts_1 PARTITION OF pgmq.q_x_parts FOR VALUES FROM (1) TO (100);
CREATE TABLE pgmq.a_x_split ($shape, archived_at timestamptz);
});
ok(defined as_app(qq{CREATE TABLE pgmq.q_x_split ($shape)}), 'the owner makes a queue whose archive is not its own');

sub refused
{
	my ($sql, $re, $what) = @_;
	my ($rc, $out, $err) = $pg->psql('postgres', $sql);
	ok($rc != 0 && $err =~ $re, $what) or diag("rc $rc, stderr: $err");
}
refused(q{SELECT pgbus_stream.attach('x_aview')}, qr/q_x_aview is not a PGMQ queue table: it is a view/,
	'attach() refuses a view');
refused(q{SELECT pgbus_stream.attach('x_ruled')}, qr/q_x_ruled is not a PGMQ queue table: it has rules/,
	'attach() refuses a table with rules');
refused(q{SELECT pgbus_stream.attach('x_texty')},
	qr/q_x_texty is not a PGMQ queue table: column message is text, not jsonb/,
	'attach() refuses a message column that is not jsonb');
refused(q{SELECT pgbus_stream.attach('x_novt')}, qr/q_x_novt is not a PGMQ queue table: it has no column vt/,
	'attach() refuses a table without PGMQ\'s columns');
refused(q{SELECT pgbus_stream.attach('x_far')}, qr/q_x_far is not a PGMQ queue table: it is a foreign table/,
	'attach() refuses a foreign table');
refused(q{SELECT pgbus_stream.attach('x_fp')},
	qr/q_x_fp is not a PGMQ queue table: its partition q_x_fp_2 is a foreign table/,
	'attach() refuses a partitioned table with a foreign partition');
refused(q{SELECT pgbus_stream.attach('x_split')},
	qr/a_x_split is not a PGMQ archive table: it belongs to another role than the queue/,
	'attach() refuses an archive of another owner');
is(q1(q{SELECT name FROM pgbus_stream.attach('x_parts')}), 'x_parts', 'a partitioned table of plain partitions is a queue');
is(q1(q{SELECT count(*) FROM pgbus_stream.streams WHERE name IN ('x_aview', 'x_ruled', 'x_texty', 'x_novt', 'x_far', 'x_fp', 'x_split')}),
	'0', 'none of them is in the catalog');

my ($rc, $out, $err) = $pg->psql('postgres', qq{CREATE TABLE pgmq.q_pgbus_autotext (msg_id bigint, read_ct integer,
	enqueued_at timestamptz, vt timestamptz, message text)}, extra_params => [ '-U', 'app' ]);
is($rc, 0, 'a table of the wrong shape made in pgmq: its CREATE TABLE succeeds');
like($err, qr/not auto-attached: .*q_pgbus_autotext is not a PGMQ queue table: column message is text, not jsonb/,
	'... auto-attach skips it with a warning saying why');
is(q1(q{SELECT count(*) FROM pgbus_stream.streams WHERE queue_table = 'q_pgbus_autotext'}), '0', '... and it is not a stream');

# Another role's archive for a queue that has none: not recorded (retention
# would move the queue's rows into a table that role controls).
q1(q{CREATE TABLE pgmq.q_pgbus_victim (msg_id bigint GENERATED ALWAYS AS IDENTITY, read_ct integer NOT NULL DEFAULT 0,
	enqueued_at timestamptz NOT NULL DEFAULT now(), vt timestamptz NOT NULL DEFAULT now(), message jsonb)});
($rc, $out, $err) = $pg->psql('postgres', qq{CREATE TABLE pgmq.a_pgbus_victim ($shape, archived_at timestamptz)},
	extra_params => [ '-U', 'app' ]);
like($err, qr/pgmq\.a_pgbus_victim is not taken as the archive of pgmq\.q_pgbus_victim: it belongs to another role/,
	'an archive made by another role for a queue: a warning');
is(q1(q{SELECT coalesce(archive_table, 'none') FROM pgbus_stream.streams WHERE name = 'victim'}), 'none',
	'... and it is not recorded as the archive');

# A queue given a rule after it was auto-attached: the hook refuses it, and
# so does a subscription (nothing is put on the table, nothing of it runs).
ok(defined as_app(q{SELECT pgmq.create('pgbus_late');
CREATE TABLE applog.late (id bigint);
CREATE RULE copy AS ON INSERT TO pgmq.q_pgbus_late DO ALSO INSERT INTO applog.late VALUES (NEW.msg_id)}),
	'the owner adds a rule to an auto-attached queue');
my $late = q1(q{SELECT id FROM pgbus_stream.streams WHERE name = 'late'});
refused("SELECT pgbus_stream._hook_triggers($late)", qr/pgmq\.q_pgbus_late is not a PGMQ queue table: it has rules/,
	'the hook refuses it');
$c = $pg->sse('/streams/late', timeout => 5);
ok(wait_for(sub { logged(qr/pgmq\.q_pgbus_late is not a queue table: it has rules/) }, 20),
	'a subscription: the worker skips it with a logged reason');
$c->close;
is(q1(q{SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pgmq.q_pgbus_late'::regclass}), '0',
	'... and puts no trigger on it');

# The worker is none the worse.
$pg->create_stream('marker');
$c = $pg->open_stream('marker');
$pg->broadcast('marker', 'still here');
ok($c->wait_for_data_events(1, 10), 'the worker still serves other streams');
$c->close;
ok(!superuser_app(), 'the owner is still no superuser');
is(evil_calls(), '0', 'and its function never ran');

$pg->finish;
done_testing();
