# 074_owner_retention: retention works on a queue table as the table's
# owner, never as the worker's superuser.
#
# An application role owns a PGMQ queue (made by pgmq.create, auto-attached)
# and puts an AFTER DELETE trigger on it. default_retention removes the
# queue's old rows, which fires the trigger. The trigger tries to make its
# role SUPERUSER, leaves a session-level search_path behind that would run a
# function of its own (to_regclass) in the worker's next catalog query, and
# logs what it is. Run as the worker's superuser, the role became SUPERUSER.
# Now: the trigger still runs (a legitimate trigger, such as this log, keeps
# working) as the table's owner, session_user the worker's, inside a
# security-restricted operation with search_path pg_catalog, pg_temp; the
# role stays what it was; the search_path it set does not outlive the
# statement. A rule put on the queue after attach makes retention skip it,
# with one logged reason. A trigger that never ends is cancelled by the
# worker's statement_timeout.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new('owner_ret', extension => 0, bearer_all => 1,
	conf => "pgbus_stream.retention_interval = 1\npgbus_stream.default_retention = '1s'\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
$pg->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
GRANT USAGE, CREATE ON SCHEMA pgmq TO app;
GRANT SELECT, INSERT, DELETE ON pgmq.meta, pgmq.notify_insert_throttle TO app;
CREATE SCHEMA applog AUTHORIZATION app;
});

sub q1 { return $pg->safe_psql('postgres', $_[0]) }

# as runs SQL as the application's role (its own connection, no superuser).
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

ok(defined as_app(q{
SELECT pgmq.create('pgbus_ret');
CREATE TABLE applog.log (id serial, note text, who text, sess text, path text, restricted text);
-- a function named like one the worker's catalog query calls
CREATE FUNCTION applog.to_regclass(text) RETURNS regclass LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO applog.log (note, who, sess) VALUES ('to_regclass', current_user, session_user);
  BEGIN EXECUTE 'ALTER ROLE app SUPERUSER'; EXCEPTION WHEN OTHERS THEN NULL; END;
  RETURN pg_catalog.to_regclass($1);
END $f$;
CREATE FUNCTION applog.on_delete() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE restricted text := 'no';
BEGIN
  BEGIN
    SET ROLE NONE;
  EXCEPTION WHEN OTHERS THEN restricted := SQLERRM;
  END;
  INSERT INTO applog.log (note, who, sess, path, restricted)
  VALUES ('deleted ' || OLD.msg_id, current_user, session_user, current_setting('search_path'), restricted);
  BEGIN
    EXECUTE 'ALTER ROLE app SUPERUSER';
    INSERT INTO applog.log (note, who, sess) VALUES ('escalated', current_user, session_user);
  EXCEPTION WHEN OTHERS THEN
    INSERT INTO applog.log (note, who, sess) VALUES ('refused: ' || SQLERRM, current_user, session_user);
  END;
  -- left behind for the worker's next statements
  PERFORM set_config('search_path', 'applog, pg_catalog', false);
  RETURN OLD;
END $f$;
CREATE TRIGGER audit AFTER DELETE ON pgmq.q_pgbus_ret FOR EACH ROW EXECUTE FUNCTION applog.on_delete();
}), 'the application role makes its queue and puts a logging trigger on it');
is(q1(q{SELECT name || '/' || auto_attached FROM pgbus_stream.streams WHERE queue_table = 'q_pgbus_ret'}),
	'ret/true', 'the queue is auto-attached');
ok(!superuser_app(), 'app is no superuser to begin with');

# Old rows: default_retention (1 s) removes them into the archive.
ok(defined as_app(q{SELECT pgmq.send('pgbus_ret', jsonb_build_object('html', 'r' || i)) FROM generate_series(1, 3) i}),
	'the application sends three messages');
ok(wait_for(sub { q1(q{SELECT count(*) FROM applog.log WHERE note LIKE 'deleted %'}) >= 3 }, 30),
	'retention removed the rows: the owner\'s trigger ran for each')
  or diag(q1(q{SELECT string_agg(note, '; ') FROM applog.log}));
# Give the catalog query a chance to run after the trigger's search_path.
$pg->create_stream('marker');
ok(!superuser_app(), 'the application role did not become SUPERUSER');
is(q1(q{SELECT count(*) FROM applog.log WHERE note IN ('escalated', 'to_regclass')}), '0',
	'nothing ran with the worker\'s rights (no escalation, no planted function called)')
  or diag(q1(q{SELECT string_agg(note || ' as ' || who, '; ') FROM applog.log}));
is(q1(q{SELECT string_agg(DISTINCT who, ',') FROM applog.log WHERE note LIKE 'deleted %'}), 'app',
	'the trigger ran as the table\'s owner');
my $worker_user = q1(q{SELECT rolname FROM pg_roles WHERE oid = 10});
is(q1(q{SELECT string_agg(DISTINCT sess, ',') FROM applog.log WHERE note LIKE 'deleted %'}), $worker_user,
	'... in the worker\'s session');
# (the rows after the first in one statement see what the trigger set)
is(q1(q{SELECT path FROM applog.log WHERE note LIKE 'deleted %' ORDER BY id LIMIT 1}), 'pg_catalog, pg_temp',
	'... with search_path pg_catalog, pg_temp');
like(q1(q{SELECT string_agg(DISTINCT restricted, ',') FROM applog.log WHERE note LIKE 'deleted %'}),
	qr/security-restricted operation/, '... inside a security-restricted operation (no SET ROLE)');
is(q1(q{SELECT count(*) FROM pgmq.q_pgbus_ret}) . '/' . q1(q{SELECT count(*) FROM pgmq.a_pgbus_ret}), '0/3',
	'the rows moved to the archive');

# The worker still works: a new stream is served and delivers.
my $c = $pg->open_stream('marker');
$pg->broadcast('marker', 'still here');
ok($c->wait_for_data_events(1, 10), 'the worker still delivers after running the owner\'s trigger');
$c->close;

# A rule put on the queue after attach: retention refuses the table, says
# why once, and runs nothing of it.
ok(defined as_app(q{
CREATE TABLE applog.ruled (msg_id bigint);
CREATE RULE keep AS ON DELETE TO pgmq.q_pgbus_ret DO ALSO INSERT INTO applog.ruled VALUES (OLD.msg_id);
SELECT pgmq.send('pgbus_ret', '{"html": "after the rule"}');
}), 'the owner adds a DELETE rule to the queue');
ok(wait_for(sub { slurp_file($pg->logfile) =~ /pgmq\.q_pgbus_ret is not a queue table: it has rules/ }, 20),
	'retention skips the queue with a logged reason');
sleep 2.5;
is(q1(q{SELECT count(*) FROM pgmq.q_pgbus_ret}) . '/' . q1(q{SELECT count(*) FROM applog.ruled}), '1/0',
	'the row stays, the rule never ran');
my @said = slurp_file($pg->logfile) =~ /(pgmq\.q_pgbus_ret is not a queue table: it has rules)/g;
cmp_ok(scalar @said, '<=', 2, 'the reason is logged once per worker, not at every retry');

# An owner's trigger that never ends: the statement is cancelled after the
# worker's statement_timeout (2 s), a SET of its own notwithstanding, and the
# worker goes on serving other streams meanwhile.
ok(defined as_app(q{
SELECT pgmq.create('pgbus_slow');
CREATE FUNCTION applog.stall() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM set_config('statement_timeout', '0', true);
  PERFORM pg_sleep(120);
  RETURN OLD;
END $f$;
CREATE TRIGGER stall BEFORE DELETE ON pgmq.q_pgbus_slow FOR EACH ROW EXECUTE FUNCTION applog.stall();
SELECT pgmq.send('pgbus_slow', '{"html": "old"}');
}), 'the owner of another queue puts a trigger that sleeps for two minutes on it');
ok(wait_for(sub { slurp_file($pg->logfile) =~ /retention failed \(retried later\): canceling statement due to statement timeout/ }, 20),
	'retention of that queue is cancelled by the statement timeout');
$c = $pg->open_stream('marker');
my $t0 = time;
$pg->broadcast('marker', 'not stalled');
ok($c->wait_for_data_events(1, 15), 'other streams still deliver');
cmp_ok(time - $t0, '<', 15, '... within seconds, not minutes');
$c->close;

$pg->finish;
done_testing();
