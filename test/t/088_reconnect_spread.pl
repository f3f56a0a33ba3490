# 088_reconnect_spread: clients dropped together do not all come back in
# the same instant, and a storm of new connections is answered in order at
# a bounded pace, never with an error.
#
# A. Each connection's retry: is between 1 and 3 s, and they differ.
# B. pgbus_stream.accept_rate = 50: 150 clients connect at once; every one
#    gets 200, the answers take about 150/50 s in all, and the clients that
#    connected first are answered first.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IO::Select;
use IO::Socket::INET;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new('main', conf => "pgbus_stream.accept_rate = 50\n");
$pg->create_stream('chat');

# ---------------------------------------------------------------- A
my %retry;
for my $i (1 .. 20)
{
	my $c = $pg->open_stream('chat');
	$retry{ $c->retry // 'none' }++;
	$c->close;
}
my @r = grep { $_ ne 'none' } keys %retry;
ok(@r == scalar(keys %retry) && !grep({ $_ < 1000 || $_ > 3000 } @r),
	'A: every retry: is between 1 and 3 s (' . join(' ', sort @r) . ')');
ok(@r >= 10, 'A: 20 connections got ' . scalar(@r) . ' different values');

# ---------------------------------------------------------------- B
sleep 0.5;    # the bucket refills after A
my $n = 150;
my (@socks, @status_at, %index);
my $sel = IO::Select->new;
for my $i (0 .. $n - 1)
{
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $pg->http_port, Proto => 'tcp')
	  or die "connect: $!";
	print $s "GET /streams/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n";
	$s->blocking(0);
	push @socks, $s;
	$index{ fileno($s) } = $i;
	$sel->add($s);
}
my $t0 = time;
my (%buf, %status);
my $deadline = $t0 + 30;
while (keys(%status) < $n && time < $deadline)
{
	for my $s ($sel->can_read(0.2))
	{
		my $i = $index{ fileno($s) };
		my $got = sysread($s, my $chunk, 65536);
		if (!$got) { $status{$i} //= 'closed'; $status_at[$i] //= time; $sel->remove($s); next }
		$buf{$i} .= $chunk;
		if (!defined $status{$i} && $buf{$i} =~ m{^HTTP/1\.\d (\d{3})})
		{
			$status{$i} = $1;
			$status_at[$i] = time;
		}
	}
}
my $all = time - $t0;
my @not200 = grep { ($status{$_} // 'none') ne '200' } 0 .. $n - 1;
ok(!@not200, "B: all $n clients got 200")
  or diag('not 200: ' . join(' ', map { "$_=" . ($status{$_} // 'none') } @not200[ 0 .. ($#not200 > 9 ? 9 : $#not200) ]));
my @at = sort { $a <=> $b } grep { defined } @status_at;
my $span = @at ? $at[-1] - $t0 : 0;
ok($span >= 2.0 && $span <= 10,
	sprintf('B: answered at a bounded pace: the last after %.2f s (150 at 50/s: about 3 s)', $span));
my $median = sub { my @v = sort { $a <=> $b } grep { defined } @_; return @v ? $v[ int(@v / 2) ] : 0 };
my $first = $median->(@status_at[ 0 .. 49 ]);
my $lastq = $median->(@status_at[ 100 .. 149 ]);
ok($first < $lastq, sprintf('B: in order: the first 50 answered after %.2f s (median), the last 50 after %.2f s',
		$first - $t0, $lastq - $t0));
close $_ for @socks;

$pg->finish;
done_testing();
