# 089_dropped_stream_quiet: dropping streams does not make the worker log a
# failed catalog read for each dropped table.
#
# 150 streams are created, written and dropped, each in its own
# transactions, while a client watches another stream (so the worker reads
# the catalog at every change). A stream dropped between the worker's read
# of the catalog and its read of the queue's maximum (two transactions) is
# read again, not warned about: no "catalog read failed ... does not exist"
# in the log. The watcher still gets its broadcasts.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode;

my $pg = PgbusNode->new('main');
$pg->create_stream('a');
my $w = $pg->open_stream('a');
is($w->status, 200, 'a watcher on another stream');

my $log_at = -s $pg->logfile;
my ($rc, $out, $err) = $pg->psql(
	'postgres', q{
DO $$
BEGIN
  FOR i IN 1..150 LOOP
    PERFORM pgbus_stream.create_stream('w_' || i);
    COMMIT;
    PERFORM pgbus_stream.broadcast('w_' || i, 'x');
    COMMIT;
    PERFORM pgbus_stream.drop_stream('w_' || i);
    COMMIT;
  END LOOP;
END $$;
}, on_error_stop => 1);
is($rc, 0, '150 streams created, written and dropped') or diag($err);
$pg->broadcast('a', 'after');
ok($w->wait_for_data_events(1, 10), 'the watcher still receives');
sleep 1;
my @vanished = substr(slurp_file($pg->logfile), $log_at) =~
  /(catalog read failed \(retried later\): relation "[^"]+" does not exist)/g;
is(scalar(@vanished), 0, 'no catalog read failed for a dropped table')
  or diag(join("\n", @vanished[ 0 .. ($#vanished > 4 ? 4 : $#vanished) ]));

$pg->finish;
done_testing();
