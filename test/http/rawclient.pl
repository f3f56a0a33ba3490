#!/usr/bin/perl
# Raw-socket clients for run.sh: the misbehaving ones curl cannot play.
#
#   rawclient.pl slowloris PORT PATH STEP_S   request line, then one header byte every STEP_S
#   rawclient.pl silent PORT                  connects and sends nothing
#   rawclient.pl noread PORT PATH SECONDS     full request, then never reads for SECONDS
#   rawclient.pl getclose PORT PATH SECONDS   request, reads for at most SECONDS; prints what came
#   rawclient.pl stall PORT PATH STALL READ   request, reads nothing for STALL s, then reads for
#                                             READ s; prints the de-chunked body
#
# slowloris and silent print "closed_after <seconds>" when the server ends
# the connection (or "still_open" after 30 s).
use strict;
use warnings;
use IO::Socket::INET;
use Socket qw(SOL_SOCKET SO_RCVBUF);
use Time::HiRes qw(time sleep);

my ($mode, $port, @rest) = @ARGV;

sub connect_to {
    my (%opt) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp')
        or die "connect: $!";
    $s->autoflush(1);
    return $s;
}

# A connected socket whose receive buffer is set small before connecting, so
# that the TCP window stays small and the server's writes back up quickly.
sub connect_small_rcvbuf {
    my $s = IO::Socket::INET->new(Proto => 'tcp') or die "socket: $!";
    setsockopt($s, SOL_SOCKET, SO_RCVBUF, pack('i', 4096)) or die "setsockopt: $!";
    my $addr = Socket::pack_sockaddr_in($port, Socket::inet_aton('127.0.0.1'));
    connect($s, $addr) or die "connect: $!";
    $s->autoflush(1);
    return $s;
}

# True once the peer closed (EOF or reset), without blocking more than $wait s.
sub peer_closed {
    my ($s, $wait) = @_;
    my $rin = '';
    vec($rin, fileno($s), 1) = 1;
    return 0 unless select(my $rout = $rin, undef, undef, $wait);
    my $n = sysread($s, my $buf, 65536);
    return !defined($n) || $n == 0;
}

if ($mode eq 'slowloris') {
    my ($path, $step) = @rest;
    my $s = connect_to();
    my $t0 = time;
    print $s "GET $path HTTP/1.1\r\nHost: x\r\n";
    my $hdr = "X-Slow: " . ("a" x 200) . "\r\n";
    my $i = 0;
    while (time - $t0 < 30) {
        if (peer_closed($s, $step)) {
            printf "closed_after %.1f\n", time - $t0;
            exit 0;
        }
        local $SIG{PIPE} = 'IGNORE';
        my $ok = syswrite($s, substr($hdr, $i++ % length($hdr), 1));
        if (!defined $ok) {
            printf "closed_after %.1f\n", time - $t0;
            exit 0;
        }
    }
    print "still_open\n";
} elsif ($mode eq 'silent') {
    my $s = connect_to();
    my $t0 = time;
    while (time - $t0 < 30) {
        if (peer_closed($s, 0.2)) {
            printf "closed_after %.1f\n", time - $t0;
            exit 0;
        }
    }
    print "still_open\n";
} elsif ($mode eq 'noread') {
    my ($path, $secs) = @rest;
    my $s = connect_small_rcvbuf();
    print $s "GET $path HTTP/1.1\r\nHost: x\r\n\r\n";
    sleep $secs;
    print "done\n";
} elsif ($mode eq 'getclose') {
    my ($path, $secs) = @rest;
    my $s = connect_to();
    print $s "GET $path HTTP/1.1\r\nHost: x\r\n\r\n";
    my $t0 = time;
    my $all = '';
    while (time - $t0 < $secs) {
        my $rin = '';
        vec($rin, fileno($s), 1) = 1;
        next unless select(my $rout = $rin, undef, undef, 0.1);
        my $n = sysread($s, my $buf, 65536);
        last if !defined($n) || $n == 0;
        $all .= $buf;
    }
    print $all;
} elsif ($mode eq 'stall') {
    my ($path, $stall, $secs) = @rest;
    my $s = connect_small_rcvbuf();
    print $s "GET $path HTTP/1.1\r\nHost: x\r\n\r\n";
    sleep $stall;
    my $t0 = time;
    my $all = '';
    while (time - $t0 < $secs) {
        my $rin = '';
        vec($rin, fileno($s), 1) = 1;
        next unless select(my $rout = $rin, undef, undef, 0.1);
        my $n = sysread($s, my $buf, 1 << 20);
        last if !defined($n) || $n == 0;
        $all .= $buf;
    }
    my $at = index($all, "\r\n\r\n");
    die "no header end\n" if $at < 0;
    my $rest = substr($all, $at + 4);
    my $body = '';
    while ($rest =~ s/^([0-9a-fA-F]+)\r\n//) {
        my $len = hex($1);
        last if length($rest) < $len + 2;
        $body .= substr($rest, 0, $len);
        substr($rest, 0, $len + 2) = '';
    }
    print $body;
} else {
    die "unknown mode $mode\n";
}
