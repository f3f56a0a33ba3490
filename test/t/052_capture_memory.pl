# 052_capture_memory: the capture trigger's memory is bounded whatever the
# statement's size.
#
# A. 100 000 rows of plain JSON (not the pgbus envelope) in one INSERT into a
#    stream's queue table: the producer backend's peak memory (VmHWM) stays
#    within 64 MB of the same INSERT into a table without the capture
#    trigger. Payloads are budgeted before they are converted, and the
#    conversion's temporaries do not outlive their row.
# B. Past the inline budget (a quarter of ring_size), rows still arrive, in
#    order: they are read back from the table.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode;

my $pg = PgbusNode->new('capmem', conf => "pgbus_stream.ring_size = 1MB\n");
$pg->create_stream('mem');
my ($qs, $qt) = split /\|/,
  $pg->safe_psql('postgres', "SELECT queue_schema, queue_table FROM pgbus_stream.streams WHERE name = 'mem'");
my $q = qq{"$qs"."$qt"};
$pg->safe_psql('postgres', "CREATE TABLE plain (LIKE $q INCLUDING ALL)");

my $ROWS = 100_000;
my $json = q{jsonb_build_object('n', i, 'text', repeat('x', 500))};

# peak_kb runs $sql in a new session and returns that backend's VmHWM in kB.
sub peak_kb
{
	my ($sql) = @_;
	my $status = $pg->safe_psql('postgres', "$sql; SELECT pg_read_file('/proc/self/status')");
	my ($kb) = $status =~ /^VmHWM:\s+(\d+)\s+kB/m;
	return $kb;
}

my $plain = peak_kb("INSERT INTO plain (message) SELECT $json FROM generate_series(1, $ROWS) i");
my $captured = peak_kb("INSERT INTO $q (message) SELECT $json FROM generate_series(1, $ROWS) i");
ok($plain && $captured, "peak memory measured: plain INSERT $plain kB, captured $captured kB");
cmp_ok($captured - $plain, '<', 64 * 1024,
	sprintf('capture adds %.1f MB to a 100 000-row INSERT (bound: 64 MB)', ($captured - $plain) / 1024));
is($pg->safe_psql('postgres', "SELECT count(*) FROM $q"), $ROWS, 'every row inserted');

# ---------------------------------------------------------------- B
$pg->safe_psql('postgres', "TRUNCATE $q");
my $c = $pg->open_stream('mem');
is($c->status, 200, 'subscriber connected');
my $N = 2000; # 2 000 x ~520 bytes: past the 256 kB inline budget of a 1 MB ring
$pg->safe_psql('postgres',
	"INSERT INTO $q (message) SELECT jsonb_build_object('html', 'row ' || i || ' ' || repeat('y', 500)) FROM generate_series(1, $N) i"
);
ok($c->wait_for_data_events($N, 60), "all $N rows arrive");
my @ev = $c->data_events;
my $in_order = 1;
for my $i (0 .. $#ev)
{
	my ($n) = $ev[$i]{data} =~ /^row (\d+) /;
	if (!defined $n || $n != $i + 1) { $in_order = 0; diag("event $i: $ev[$i]{data}"); last }
}
ok($in_order && @ev == $N, 'in order, none twice, none missing');
$c->close;

$pg->finish;
done_testing();
