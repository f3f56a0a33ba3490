# PsqlSession: a psql process fed one statement at a time, for tests that
# need a transaction to stay open (or a statement to wait on a lock) while
# the test does something else.
#
#   my $s = psql_session($pg);                 # $pg: a PgbusNode
#   session_query($s, 'BEGIN');                # runs, returns the output
#   session_send($s, 'LOCK TABLE t');          # sent; may be waiting
#   session_wait($s);                          # the output of what was sent
#   session_end($s);
package PsqlSession;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;

our @EXPORT = qw(psql_session session_query session_send session_wait session_end);

sub psql_session
{
	my ($pg) = @_;
	my %s = (in => '', out => '', err => '', n => 0, timer => IPC::Run::timeout(60));
	$s{h} = IPC::Run::start([ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=0', '-d', $pg->connstr('postgres') ],
		'<', \$s{in}, '>', \$s{out}, '2>', \$s{err}, $s{timer});
	return \%s;
}

# session_send queues one statement (and a marker after it) without waiting.
sub session_send
{
	my ($s, $sql) = @_;
	$s->{mark} = 'pgbus-done-' . ++$s->{n};
	$s->{out} = '';
	$s->{err} = '';
	$s->{in} .= "$sql;\n\\echo $s->{mark}\n";
	$s->{timer}->start(30);    # a session left idle longer than its last wait is still usable
	$s->{h}->pump_nb;
	return;
}

# session_wait waits for the statement sent last; returns its output. In
# list context also its error text ('' when none).
sub session_wait
{
	my ($s) = @_;
	$s->{timer}->start(30);
	$s->{h}->pump while $s->{out} !~ /^\Q$s->{mark}\E$/m;
	my $out = $s->{out} =~ s/\Q$s->{mark}\E\n//r;
	return wantarray ? ($out, $s->{err}) : $out;
}

# session_query runs one statement; dies on an error unless $may_fail.
sub session_query
{
	my ($s, $sql, $may_fail) = @_;
	session_send($s, $sql);
	my ($out, $err) = session_wait($s);
	die "psql: $err" if !$may_fail && $err =~ /ERROR/;
	return wantarray ? ($out, $err) : $out;
}

sub session_end
{
	my ($s) = @_;
	$s->{in} .= "\\q\n";
	$s->{timer}->start(30);
	$s->{h}->finish;
	return;
}

1;
