# 011_capture_paths: a queue is captured by one AFTER INSERT FOR EACH ROW
# trigger (no statement trigger, no transition table); the floor comes from
# the library before a statement draws ids.
#
# A. The hooked queue's trigger: one row trigger (no statement-level one, no
#    transition table), enabled ALWAYS.
# B. Every way of inserting reaches a live subscriber exactly once, in commit
#    order: multi-row INSERT, INSERT ... SELECT, COPY FROM STDIN, ON CONFLICT
#    DO NOTHING (the skipped row is not sent), a savepoint rolled back, a
#    writable CTE, MERGE, an INSERT inside a PL/pgSQL function, broadcast()
#    (its result is the row's msg_id), and a table with the user's own BEFORE
#    and AFTER row triggers (the row as the BEFORE trigger left it); a
#    partitioned queue (INSERT and COPY into both partitions).
# C. An insert that has drawn its id but not finished (COPY waiting for more
#    input; a function's INSERT sleeping after its nextval) holds the horizon:
#    a commit of a later id meanwhile is sent with a cursor whose horizon is
#    below the id in flight; the row arrives when its transaction commits.
# D. In a session with session_replication_role = replica (as a
#    subscription's apply worker runs) the same trigger takes rows as applied
#    by logical replication: each row (INSERT, COPY) is streamed once, an
#    explicit id below the committed maximum is kept (not refused as a
#    producer's would be), one above the stream's hold is streamed, one below
#    it is applied with a WARNING and announced as missing; no floor is
#    published before such a statement (else the id above the hold would be
#    reported too).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(parse_token);
use PsqlSession;

# A hold long enough that it is still in force through section D.
my $pg = PgbusNode->new('paths', conf => "pgbus_stream.logical_hold = 60s\n");
$pg->create_stream('paths');
my $Q = 'pgbus_stream.q_pgbus_paths';
my $seq = $pg->safe_psql('postgres', "SELECT pg_get_serial_sequence('$Q', 'msg_id')");
sub q1 { return $pg->safe_psql('postgres', $_[0]) }

# ---- A. the triggers ----
is( q1(
		qq{SELECT string_agg(tgname || ' ' || CASE WHEN tgtype & 1 = 1 THEN 'row' ELSE 'statement' END
		                     || CASE WHEN tgnewtable IS NULL THEN '' ELSE ' transition' END
		                     || ' enabled ' || tgenabled::text, ', ' ORDER BY tgname)
		     FROM pg_trigger WHERE tgrelid = '$Q'::regclass AND NOT tgisinternal}),
	'pgbus_stream_capture row enabled A',
	'the queue has one row trigger, without a transition table, enabled ALWAYS');

# ---- B. every insert path ----
my $c = $pg->sse('/streams/paths');
ok($c->wait_for_events(1, 10), 'subscriber connected');
sub env { return "jsonb_build_object('html', $_[0]::text)" }
q1("CREATE UNIQUE INDEX paths_html ON $Q ((message->>'html'))");
my @want;
q1("INSERT INTO $Q (message) VALUES (" . env("'m1'") . '), (' . env("'m2'") . ')');
push @want, qw(m1 m2);
q1("INSERT INTO $Q (message) SELECT " . env("'s' || g") . ' FROM generate_series(1, 3) g');
push @want, qw(s1 s2 s3);
q1("COPY $Q (message) FROM STDIN;\n{\"html\": \"c1\"}\n{\"html\": \"c2\"}\n\\.\n");
push @want, qw(c1 c2);
q1("INSERT INTO $Q (message) VALUES (" . env("'m1'") . '), (' . env("'d1'") . ') ON CONFLICT DO NOTHING');
push @want, qw(d1);
q1('DROP INDEX pgbus_stream.paths_html');
q1("BEGIN; INSERT INTO $Q (message) VALUES (" . env("'p1'") . "); SAVEPOINT a; INSERT INTO $Q (message) VALUES ("
	  . env("'gone'") . "); ROLLBACK TO a; INSERT INTO $Q (message) VALUES (" . env("'p2'") . '); COMMIT');
push @want, qw(p1 p2);
q1("WITH x AS (INSERT INTO $Q (message) VALUES (" . env("'w1'") . ') RETURNING msg_id) SELECT count(*) FROM x');
push @want, qw(w1);
q1("MERGE INTO $Q q USING (VALUES ('g1')) v(h) ON false WHEN NOT MATCHED THEN INSERT (message) VALUES ("
	  . env('v.h') . ')');
push @want, qw(g1);
q1( qq{CREATE FUNCTION put(h text, pause float8 DEFAULT 0) RETURNS bigint LANGUAGE plpgsql AS \$\$
DECLARE id bigint;
BEGIN
  -- msg_id (the first column, nextval) is drawn before the message and its pause
  INSERT INTO $Q (message) VALUES (jsonb_build_object('html', h || pg_sleep(pause)::text)) RETURNING msg_id INTO id;
  RETURN id;
END \$\$});
my $f1 = q1("SELECT put('f1')");
push @want, qw(f1);
my $b1 = $pg->broadcast('paths', 'b1');
push @want, qw(b1);
is($b1, q1("SELECT msg_id FROM $Q WHERE message->>'html' = 'b1'"), "broadcast() returns the row's msg_id");
is($f1, q1("SELECT msg_id FROM $Q WHERE message->>'html' = 'f1'"), "the function's RETURNING msg_id");
q1( qq{CREATE TABLE side (msg_id bigint);
CREATE FUNCTION shout() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN NEW.message := jsonb_build_object('html', (NEW.message->>'html') || '!'); RETURN NEW; END \$\$;
CREATE FUNCTION note() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN INSERT INTO side VALUES (NEW.msg_id); RETURN NULL; END \$\$;
CREATE TRIGGER a_shout BEFORE INSERT ON $Q FOR EACH ROW EXECUTE FUNCTION shout();
CREATE TRIGGER z_note AFTER INSERT ON $Q FOR EACH ROW EXECUTE FUNCTION note();});
q1("INSERT INTO $Q (message) VALUES (" . env("'u1'") . ')');
push @want, qw(u1!);
is(q1("SELECT count(*) FROM side s JOIN $Q q USING (msg_id) WHERE q.message->>'html' = 'u1!'"),
	1, "the user's AFTER trigger ran too");
q1("DROP TRIGGER a_shout ON $Q; DROP TRIGGER z_note ON $Q");

ok($c->wait_for_data_events(scalar @want, 20), scalar(@want) . ' events arrived')
  or diag(join ' ', map { $_->{data} } $c->data_events);
sleep(0.3);
is_deeply([ map { $_->{data} } $c->data_events ], \@want, 'every insert path: each row once, in commit order');

# A partitioned queue: the partitions fire the clone of its row trigger.
q1(q{CREATE SEQUENCE pgbus_stream.q_parted_seq;
CREATE TABLE pgbus_stream.q_parted (msg_id bigint NOT NULL DEFAULT nextval('pgbus_stream.q_parted_seq'),
  read_ct int DEFAULT 0, enqueued_at timestamptz DEFAULT now(), last_read_at timestamptz,
  vt timestamptz DEFAULT now(), message jsonb, headers jsonb) PARTITION BY RANGE (msg_id);
ALTER SEQUENCE pgbus_stream.q_parted_seq OWNED BY pgbus_stream.q_parted.msg_id;
CREATE TABLE pgbus_stream.q_parted_1 PARTITION OF pgbus_stream.q_parted FOR VALUES FROM (1) TO (3);
CREATE TABLE pgbus_stream.q_parted_2 PARTITION OF pgbus_stream.q_parted FOR VALUES FROM (3) TO (1000000);
SELECT pgbus_stream.attach('parted', public => true);});
$pg->wait_stream_served('parted');
my $pc = $pg->open_stream('parted');
q1(q{INSERT INTO pgbus_stream.q_parted (message) VALUES ('{"html": "x1"}'), ('{"html": "x2"}'), ('{"html": "x3"}')});
q1("COPY pgbus_stream.q_parted (message) FROM STDIN;\n{\"html\": \"x4\"}\n\\.\n");
is( q1(
		q{SELECT string_agg(tgrelid::regclass || ' ' || tgenabled::text, ', ' ORDER BY tgrelid::regclass::text)
		    FROM pg_trigger WHERE tgname = 'pgbus_stream_capture' AND tgparentid <> 0}),
	'pgbus_stream.q_parted_1 A, pgbus_stream.q_parted_2 A',
	'partitioned queue: the clones are enabled ALWAYS too');
q1(q{SET session_replication_role = replica; INSERT INTO pgbus_stream.q_parted (message) VALUES ('{"html": "x5"}')});
ok($pc->wait_for_data_events(5, 10), 'partitioned queue: rows of both partitions arrive');
is(join(' ', map { $_->{data} } $pc->data_events), 'x1 x2 x3 x4 x5', 'partitioned queue: each once, in order');
is(q1(q{SELECT count(DISTINCT tableoid) FROM pgbus_stream.q_parted}), 2, 'partitioned queue: two partitions written');
$pc->close;

# ---- C. an id drawn and not committed holds the horizon ----
sub wait_drawn
{
	my ($above) = @_;
	my $t0 = time;
	sleep(0.05) while q1("SELECT last_value FROM $seq") <= $above && time - $t0 < 20;
	return q1("SELECT last_value FROM $seq") > $above;
}

# holds($label, $start, $finish): $start begins a transaction on its own
# session that draws one id and stays in its statement; a broadcast commits
# meanwhile; $finish lets the first one end and commit.
sub holds
{
	my ($label, $start, $finish) = @_;
	my $before = q1("SELECT max(msg_id) FROM $Q");
	my $n = scalar $c->data_events;
	my $s = psql_session($pg);
	$start->($s);
	ok(wait_drawn($before), "$label: the id is drawn");
	my $later = $pg->broadcast('paths', "after-$label");
	ok($c->wait_for_data_events($n + 1, 10), "$label: the later commit is sent at once");
	my $ev = ($c->data_events)[$n];
	is($ev && $ev->{data}, "after-$label", "$label: it is the later commit");
	my $tok = parse_token($ev && $ev->{id});
	ok($tok && $tok->{horizon} <= $before,
		"$label: its cursor's horizon (" . ($tok ? $tok->{horizon} : '?') . ") stays at or below $before, under the id in flight");
	$finish->($s);
	session_end($s);
	ok($c->wait_for_data_events($n + 2, 10), "$label: the row in flight arrives after its commit");
	my $last = ($c->data_events)[ $n + 1 ];
	like($last && $last->{data}, qr/^late-\Q$label\E/, "$label: it is the row in flight");
	return;
}

holds(
	'function',
	sub { session_send($_[0], "BEGIN; SELECT put('late-function', 3); COMMIT") },
	sub { session_wait($_[0]) });
# psql sends COPY data in 8 kB pieces: the first row goes out complete with
# the start of a long second one; the rest waits for the test.
my $filler = 'x' x 20000;
holds(
	'copy',
	sub {
		my ($s) = @_;
		$s->{in} .= "BEGIN;\nCOPY $Q (message) FROM STDIN;\n{\"html\": \"late-copy\"}\n{\"html\": \"late-copy-$filler";
		$s->{h}->pump_nb;
	},
	sub {
		my ($s) = @_;
		$s->{in} .= "\"}\n\\.\n";
		session_send($s, 'COMMIT');
		session_wait($s);
	});
is(q1("SELECT count(*) FROM $Q WHERE message->>'html' LIKE 'late-%'"), 3, 'the rows in flight were committed');

# ---- D. replica role: the applied path ----
# replica($sql): runs $sql in a session with session_replication_role =
# replica; returns its exit code and stderr.
sub replica
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $pg->psql('postgres', "SET session_replication_role = replica;\n$sql",
		stdout => \$out, stderr => \$err, on_error_stop => 1);
	return ($rc, $err);
}
sub insert_id { return "INSERT INTO $Q (msg_id, message) OVERRIDING SYSTEM VALUE VALUES ($_[0], " . env("'$_[1]'") . ')' }
my $n = scalar $c->data_events;
my $base = q1("SELECT max(msg_id) FROM $Q");
my $top = $base + 20; # ids $base + 1 .. $top are never drawn
q1("SELECT setval('$seq', $top)");
q1("INSERT INTO $Q (message) VALUES (" . env("'o1'") . ')');    # $top + 1
# The first applied commit starts the hold at the committed maximum, $top + 1.
my ($rc, $err) = replica("INSERT INTO $Q (message) VALUES (" . env("'r1'") . ')');
is($rc, 0, 'replica role: INSERT') or diag($err);
($rc, $err) = replica("COPY $Q (message) FROM STDIN;\n{\"html\": \"r2\"}\n{\"html\": \"r3\"}\n\\.\n");
is($rc, 0, 'replica role: COPY') or diag($err);
($rc, $err) = replica(insert_id($top + 10, 'r4'));
is($rc, 0, 'replica role: an explicit id above the committed maximum') or diag($err);
($rc, $err) = replica(insert_id($top + 6, 'r5'));
is($rc, 0, 'replica role: an id below the committed maximum is kept, not refused') or diag($err);
unlike($err, qr/replicated msg_id/, '... and, above the hold, not reported');
my $missing = $base + 5;
($rc, $err) = replica(insert_id($missing, 'r6'));
is($rc, 0, 'replica role: an id below the hold is applied') or diag($err);
like($err, qr/WARNING:  pgbus_stream: replicated msg_id $missing is not above \d+/, '... with a WARNING');
ok($c->wait_until(sub { grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $c->events }, 10),
	'replica role: the subscriber is told of the id below the hold');
my ($gap) = grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $c->events;
like($gap->{data} // '', qr/"reason":"late","ids":\[$missing\]/, "... that id $missing is missing");
q1("SELECT setval('$seq', $top + 20)");
q1("INSERT INTO $Q (message) VALUES (" . env("'o2'") . ')');
ok($c->wait_for_data_events($n + 7, 10), 'replica role: the rows arrive');
sleep(0.3);
is_deeply(
	[ map { $_->{data} } ($c->data_events)[ $n .. scalar($c->data_events) - 1 ] ],
	[qw(o1 r1 r2 r3 r4 r5 o2)],
	'replica role: each row once, in commit order (the one below the hold not streamed)');

$c->close;
$pg->finish;
done_testing();
