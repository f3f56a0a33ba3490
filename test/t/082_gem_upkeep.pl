# 082_gem_upkeep: what the pgbus gem keeps doing to its queues and tables
# after the switch.
#
#  - its table maintenance on a live stream: VACUUM, REINDEX TABLE
#    CONCURRENTLY, its NOTIFY trigger dropped and re-made, ALTER TABLE ...
#    SET (fillfactor = 70), while a producer sends: every message arrives
#    once, in order, live and on a reconnect from the start;
#  - its Insights page and Prometheus gauges read the app's own
#    pgbus_stream_stats table (a Rails migration): with
#    pgbus_stream.stats_table naming it, stats_enabled writes it with the
#    gem's semantics (connect and disconnect rows, one broadcast row per
#    batch with its fan-out) and retention (stats_max_age) applies to it;
#    a table whose writing would run code its owner controls (a trigger) is
#    not written, and the log says why.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use IPC::Run;
use PgbusNode;
use GemApp qw(gem_queue gem_create gem_send gem_send_sql signed);

my $KEY = 'gem-upkeep-signing-secret';
my $pg = PgbusNode->new(
	'gemupkeep',
	extension => 0,
	heartbeat => 15,
	conf => "pgbus_stream.signing_secret = '$KEY'\n"
	  . "pgbus_stream.retention_interval = 1\n"
	  . "pgbus_stream.cursor_flush_interval = 200ms\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');

sub gem_path { return "/pgbus/streams/" . signed($_[0], $KEY) }
sub q1 { return $pg->safe_psql('postgres', $_[0]) }

# ---- table maintenance on a live stream ---------------------------------------
{
	my $name = 'gid://app/Board/1:messages';
	my $q = gem_create($pg, $name);
	my $t = 'pgmq.q_' . lc $q;
	my $c = $pg->sse(gem_path($name) . '?since=0');
	is($c->status, 200, 'maintenance: live connection');
	# The producer: 600 sends, one per transaction, in the background.
	my $N = 600;
	my ($in, $out, $err) = ('', '', '');
	my $sql = join('', map { gem_send_sql($name, "m$_") . ";\n" } 1 .. $N);
	my $producer = IPC::Run::start([ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $pg->connstr('postgres') ],
		'<', \$sql, '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	my @steps = (
		"VACUUM $t",
		"REINDEX TABLE CONCURRENTLY $t",
		"SELECT pgmq.disable_notify_insert('$q')",
		"SELECT pgmq.enable_notify_insert('$q', 0)",
		"ALTER TABLE $t SET (fillfactor = 70)",
		"VACUUM (ANALYZE) $t",
		"DROP TRIGGER trigger_notify_queue_insert_listeners ON $t",
		"SELECT pgmq.enable_notify_insert('$q', 0)",
		"REINDEX TABLE CONCURRENTLY $t",);
	for my $step (@steps)
	{
		$c->poll(0.15);
		my ($rc, $o, $e) = $pg->psql('postgres', $step);
		is($rc, 0, "maintenance while it streams: $step") or diag($e);
	}
	ok($producer->finish, 'maintenance: the producer sent everything') or diag($err);
	ok($c->wait_for_events($N, 60), "maintenance: $N events") or diag($c->event_count);
	$c->poll(0.5);
	my @got = map { $_->{data} } $c->events;
	is(scalar @got, $N, 'maintenance: each message once');
	is_deeply(\@got, [ map { "m$_" } 1 .. $N ], 'maintenance: in order');
	$c->close;
	$c = $pg->sse(gem_path($name) . '?since=0');
	ok($c->wait_for_events($N, 30), 'maintenance: a reconnect from 0 gets them all');
	$c->poll(0.3);
	is_deeply([ map { $_->{data} } $c->events ], [ map { "m$_" } 1 .. $N ], 'maintenance: once each, in order');
	$c->close;
}

# ---- the app's pgbus_stream_stats --------------------------------------------
# The table as the gem's Rails migration makes it (create_table with a
# bigserial id; created_at a timestamp without time zone, filled in UTC).
q1(q{CREATE ROLE app_owner});
q1(q{CREATE TABLE public.pgbus_stream_stats (
  id bigserial PRIMARY KEY,
  stream_name character varying NOT NULL,
  event_type character varying NOT NULL,
  duration_ms integer,
  fanout integer,
  created_at timestamp(6) without time zone NOT NULL)});
q1(q{CREATE INDEX index_pgbus_stream_stats_on_stream_name_and_created_at ON public.pgbus_stream_stats (stream_name, created_at)});
q1(q{ALTER TABLE public.pgbus_stream_stats OWNER TO app_owner});
q1(q{INSERT INTO public.pgbus_stream_stats (stream_name, event_type, duration_ms, created_at)
     VALUES ('old', 'connect', 0, now() AT TIME ZONE 'UTC' - interval '30 days')});
$pg->append_conf('postgresql.conf',
	"pgbus_stream.stats_enabled = on\npgbus_stream.stats_table = 'public.pgbus_stream_stats'\n");
$pg->reload;

sub wait_sql
{
	my ($sql, $want, $timeout) = @_;
	my $deadline = time + ($timeout // 15);
	my $got;
	while (time < $deadline)
	{
		$got = q1($sql);
		return $got if $got eq $want;
		sleep 0.2;
	}
	return $got;
}

{
	is(wait_sql(q{SELECT count(*) FROM public.pgbus_stream_stats WHERE stream_name = 'old'}, '0'),
		'0', 'stats table: retention (stats_max_age) removes rows older than it');
	my $name = 'stats:room';
	my $q = gem_create($pg, $name);
	my $stream = q1("SELECT name FROM pgbus_stream.streams WHERE queue_name = lower('$q')");
	my @c = map { $pg->sse(gem_path($name) . '?since=0') } 1 .. 3;
	is(scalar(grep { $_->status == 200 } @c), 3, 'stats table: three connections');
	is(wait_sql(qq{SELECT count(*) FROM public.pgbus_stream_stats WHERE event_type = 'connect' AND stream_name = '$stream'}, '3'),
		'3', 'stats table: a connect row each');
	# One transaction of five rows: one batch.
	q1('BEGIN; ' . join('; ', map { gem_send_sql($name, "s$_") } 1 .. 5) . '; COMMIT');
	ok($_->wait_for_events(5, 10), 'stats table: five events') for @c;
	is(wait_sql(qq{SELECT count(*) || ' ' || max(fanout) FROM public.pgbus_stream_stats WHERE event_type = 'broadcast' AND stream_name = '$stream'}, '1 3'),
		'1 3', 'stats table: one broadcast row for the batch, fan-out 3');
	$_->close for @c;
	is(wait_sql(qq{SELECT count(*) FROM public.pgbus_stream_stats WHERE event_type = 'disconnect' AND stream_name = '$stream' AND duration_ms >= 0 AND fanout IS NULL}, '3'),
		'3', 'stats table: a disconnect row each, with its duration');
	is(q1(q{SELECT count(*) FROM public.pgbus_stream_stats WHERE created_at > now() AT TIME ZONE 'UTC' - interval '1 minute' AND created_at < now() AT TIME ZONE 'UTC' + interval '1 minute'}),
		q1(q{SELECT count(*) FROM public.pgbus_stream_stats}), 'stats table: created_at in UTC, as Rails writes it');
	is(q1(q{SELECT count(*) FROM pgbus_stream.stream_stats}), '0', 'stats table: pgbus_stream.stream_stats left alone');

	# A trigger on it would run its owner's code with the worker's rights: not written.
	# (The log is read from before the trigger exists: the worker may try a
	# write, and say why it refuses it, as soon as it does.)
	my $offset = -s $pg->logfile;
	q1(q{CREATE FUNCTION public.stats_trigger() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'});
	q1(q{CREATE TRIGGER t BEFORE INSERT ON public.pgbus_stream_stats FOR EACH ROW EXECUTE FUNCTION public.stats_trigger()});
	my $before = q1(q{SELECT count(*) FROM public.pgbus_stream_stats});
	my $s = $pg->sse(gem_path($name) . '?since=0');
	ok($s->wait_for_events(5, 10), 'stats table with a trigger: the stream still works');
	my $deadline = time + 10;
	my $log = '';
	while (time < $deadline && $log !~ /stats_table/)
	{
		$log = slurp_file($pg->logfile, $offset);
		sleep 0.2;
	}
	like($log, qr/pgbus_stream\.stats_table "public\.pgbus_stream_stats" is not written because it has triggers/,
		'stats table with a trigger: the log says why');
	is(q1(q{SELECT count(*) FROM public.pgbus_stream_stats}), $before, 'stats table with a trigger: not written');
	$s->close;
	q1(q{DROP TRIGGER t ON public.pgbus_stream_stats});
	ok(wait_sql(q{SELECT count(*) > } . $before . q{ FROM public.pgbus_stream_stats}, 't') eq 't',
		'stats table: written again (the rows kept) once the trigger is gone');
}

$pg->finish;
done_testing();
