# 093_pg_versions: the PostgreSQL APIs that differ between the supported
# majors (src/pg/compat.hpp; docs/ARCHITECTURE.md, "Supported PostgreSQL
# versions"), on the server of this run (test/run_all.sh runs the TAP suite
# against 15, 17 and 18). The server is one of those majors. A role that
# owns the extension, not a superuser, lists a private stream's presence and
# another role may not (owns_extension). The commit's own WAL record for
# standbys reaches disk at once, not at the WAL writer's next round
# (wake_wal_writer): with wal_writer_delay at 10 s (and wal_writer_flush_after
# 0: a WAL writer that wakes flushes what it writes) the flush position passes
# the record within 2 s of the commit, broadcast after broadcast. Capture and
# the worker's wait (my_proc_number, create_session_wait_event_set) run in
# every other test; my_local_xid in 036_logical.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new('versions',
	allows_streaming => 1,
	conf => "wal_writer_delay = '10s'\nwal_writer_flush_after = 0\nsynchronous_commit = on\n");

# ---- the server's major ------------------------------------------------------------------
my $num = $pg->safe_psql('postgres', 'SHOW server_version_num');
my $major = int($num / 10000);
ok((grep { $_ == $major } 15, 17, 18), "the server is PostgreSQL $major ($num), a supported major");

# ---- the extension's owner, not a superuser ----------------------------------------------
$pg->create_stream('room', public => 0);
$pg->safe_psql(
	'postgres', q{
CREATE ROLE keeper LOGIN;
CREATE ROLE other LOGIN;
GRANT USAGE ON SCHEMA pgbus_stream TO keeper, other;
UPDATE pg_extension SET extowner = 'keeper'::regrole WHERE extname = 'pgbus_stream';
});
my ($rc, $out, $err) =
  $pg->psql('postgres', "SET ROLE keeper; SELECT count(*) FROM pgbus_stream.presence('room')");
is($rc, 0, 'the extension\'s owner (no superuser) lists a private stream\'s presence') or diag($err);
($rc, $out, $err) = $pg->psql('postgres', "SET ROLE other; SELECT count(*) FROM pgbus_stream.presence('room')");
isnt($rc, 0, 'another role may not');
like($err, qr/permission denied for the presence of private stream "room"/, '... with a clear error');
$pg->safe_psql('postgres',
	q{UPDATE pg_extension SET extowner = current_user::regrole WHERE extname = 'pgbus_stream'});

# ---- the commit's WAL record is flushed at once --------------------------------------------
$pg->create_stream('walled');
is($pg->safe_psql('postgres', 'SHOW wal_level'), 'replica', 'wal_level replica: records for standbys are written');
# The broadcast's commit is flushed before it returns; the extension's own
# record follows it. The insert position read right after the commit is at
# or past that record's end.
# The wait runs inside the session (no client process per look, which on an
# assertion-enabled build under load took most of a second each). A record
# written by another process between the commit and the insert position's
# read can hold one look for a WAL writer round: one slow broadcast in seven
# is allowed. Without the wake each flush waits for the WAL writer's next
# round, up to 10 s: all but one within 2 s would then pass by chance in
# well under 1 % of runs.
$pg->safe_psql('postgres', q{
CREATE FUNCTION public.wait_flushed(target pg_lsn, lim interval) RETURNS float8
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
  WHILE pg_current_wal_flush_lsn() < target LOOP
    IF clock_timestamp() - t0 > lim THEN
      RETURN -1;
    END IF;
    PERFORM pg_sleep(0.005);
  END LOOP;
  RETURN extract(epoch FROM clock_timestamp() - t0);
END $$});
my @took;
for my $i (1 .. 7)
{
	my $out = $pg->safe_psql('postgres',
		"SELECT pgbus_stream.broadcast('walled', 'm$i'); "
		  . "SELECT public.wait_flushed(pg_current_wal_insert_lsn(), '2 s')");
	push @took, (split /\n/, $out)[-1];
}
my $late = grep { $_ < 0 } @took;
cmp_ok($late, '<=', 1,
	'the broadcasts\' records are flushed within 2 s of the commit (wal_writer_delay 10 s; seconds: '
	  . join(' ', map { $_ < 0 ? '>2' : sprintf('%.3f', $_) } @took) . ')');

$pg->finish;
done_testing();
