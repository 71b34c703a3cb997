#!/usr/bin/perl
# POSIX (fcntl) byte-range locks for the VM stage `ha` (guest-ha.sh, guest-ha-rdma.sh).
# Perl, not python3: the guest's userland is the host's root over 9p under a software
# CPU, where a python3 start reads hundreds of files (seconds); perl with Fcntl a few.
# Linux sends an fcntl lock on an NFSv4 mount as LOCK (RFC 8881 §18.10), or LOCK with
# reclaim = true after the server restarted (§8.4.2.1). flock(1) is not used: flock(2)
# is another lock family.
#
#   ha-lock.pl app PATH LINES [RELEASE [STOP]]
#       the application: a write lock on the whole file (F_SETLKW), "locked", then LINES
#       numbered lines ("line 0000\n"...), each appended and fsynced, 0.2 s apart
#       ("line N: paused Xs at T" when one took over a second, T the epoch time it
#       ended: guest-ha.sh's first successful write after a kill), "written"; then,
#       with RELEASE, it keeps the lock until the file RELEASE exists; unlock, "done".
#       With STOP, it writes no more lines once the file STOP exists (several
#       takeovers in a row, HA_ROUNDS: their length is not known in advance) and says
#       "lines N" before "written". Any error: a message and exit 1.
#   ha-lock.pl try PATH
#       another lock owner: one non-blocking attempt (F_SETLK) at a write lock on the
#       whole file. Exit 0 "granted" (released at exit), 3 "refused" (EAGAIN/EACCES:
#       the server answered NFS4ERR_DENIED), 1 on any other error.
use strict;
use warnings;
use Fcntl qw(O_RDWR O_CREAT O_APPEND SEEK_SET F_SETLK F_SETLKW F_WRLCK F_UNLCK);
use IO::Handle;
use Time::HiRes qw(time sleep);

$| = 1;

# struct flock on x86_64 Linux: short l_type, short l_whence, (pad), off_t l_start,
# off_t l_len (0: to the end of the file, whatever its size), pid_t l_pid, (pad).
sub lock_whole {
    my ($fh, $cmd, $type) = @_;
    my $fl = pack("s s x4 q q i x4", $type, SEEK_SET, 0, 0, 0);
    return fcntl($fh, $cmd, $fl);
}

my $mode = shift @ARGV // '';
if ($mode eq 'app') {
    my ($path, $lines, $release, $stop) = @ARGV;
    defined $lines or die "usage: ha-lock.pl app PATH LINES [RELEASE [STOP]]\n";
    sysopen(my $fh, $path, O_RDWR | O_CREAT | O_APPEND, 0644) or die "open $path: $!\n";
    lock_whole($fh, F_SETLKW, F_WRLCK) or die "lock $path: $!\n";
    print "locked\n";
    my $n_lines = 0;
    for my $i (0 .. $lines - 1) {
        last if defined $stop && -e $stop;
        my $t = time;
        my $line = sprintf("line %04d\n", $i);
        my $n = syswrite($fh, $line);
        defined $n && $n == length $line or die "write line $i: $!\n";
        $fh->sync or die "fsync line $i: $!\n";
        my $end = time;
        my $dt = $end - $t;
        printf "line %d: paused %.1fs at %.3f\n", $i, $dt, $end if $dt > 1;
        $n_lines = $i + 1;
        sleep 0.2;
    }
    print "lines $n_lines\n" if defined $stop;
    print "written\n";
    if (defined $release) {
        sleep 0.1 until -e $release;
    }
    lock_whole($fh, F_SETLK, F_UNLCK) or die "unlock $path: $!\n";
    close($fh) or die "close $path: $!\n";
    print "done\n";
    exit 0;
} elsif ($mode eq 'try') {
    my ($path) = @ARGV;
    defined $path or die "usage: ha-lock.pl try PATH\n";
    sysopen(my $fh, $path, O_RDWR) or do { print "open $path: $!\n"; exit 1 };
    if (lock_whole($fh, F_SETLK, F_WRLCK)) {
        print "granted\n";
        exit 0;
    }
    if ($!{EAGAIN} || $!{EACCES}) {
        print "refused\n";
        exit 3;
    }
    print "lock $path: $!\n";
    exit 1;
}
die "usage: ha-lock.pl app PATH LINES [RELEASE [STOP]] | try PATH\n";
