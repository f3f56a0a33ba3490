# 072_standby_records: the capture's WAL messages replay on a node without
# the library, and pgbus_stream.standby_records = off leaves them out.
#
# A. standby_records on (the default): a standby that does not preload the
#    library replays the primary's broadcasts and their messages (0.2.0's
#    records stopped its recovery at the first one).
# B. standby_records off: such a standby replays the primary's broadcasts.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

# A plain standby of $primary (a PgbusNode): no pgbus_stream preloaded.
sub plain_standby
{
	my ($name, $primary) = @_;
	$primary->node->backup("backup_for_$name");
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init_from_backup($primary->node, "backup_for_$name", has_streaming => 1);
	$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\nhot_standby = on\n");
	$node->start;
	return $node;
}

# ---------------------------------------------------------------- A
my $on = PgbusNode->new('records_on', allows_streaming => 1);
$on->create_stream('a');
my $sa = plain_standby('plain_a', $on);
$on->wait_for_catchup($sa, 'replay');
$on->broadcast('a', "m$_") for 1 .. 5;
$on->wait_for_catchup($sa, 'replay');
is($sa->safe_psql('postgres', q{SELECT count(*) FROM pgbus_stream.q_pgbus_a}), '5',
	'A: with standby_records on the plain standby replays every broadcast');
unlike(slurp_file($sa->logfile), qr/resource manager|FATAL|PANIC/,
	'A: and its recovery met nothing it could not replay');
$sa->stop;

# ---------------------------------------------------------------- B
my $off = PgbusNode->new('records_off', allows_streaming => 1,
	conf => "pgbus_stream.standby_records = off\n");
$off->create_stream('b');
my $sb = plain_standby('plain_b', $off);
my $c = $off->open_stream('b');
$off->broadcast('b', "m$_") for 1 .. 5;
ok($c->wait_for_data_events(5, 10), 'B: the primary serves as usual');
$c->close;
$off->wait_for_catchup($sb, 'replay');
is($sb->safe_psql('postgres', q{SELECT count(*) FROM pgbus_stream.q_pgbus_b}), '5',
	'B: with standby_records off the plain standby replays every broadcast');
unlike(slurp_file($sb->logfile), qr/resource manager/, 'B: and meets no record of ours');

$sb->stop;
$off->finish;
$on->finish;
done_testing();
