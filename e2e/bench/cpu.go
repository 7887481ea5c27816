package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of /proc/<pid>/stat times.
const clockTick = 100

// cpuOf returns the CPU time (user + system) pid has used.
func cpuOf(pid int) time.Duration { return cpuTimes(pid, false) }

// cpuTimes returns the CPU time pid has used and, with children, what its
// children that exited and were waited for used too.
func cpuTimes(pid int, children bool) time.Duration {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// Fields after the command, which is in parentheses and may hold spaces.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 15 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	if children {
		cutime, _ := strconv.ParseInt(fields[13], 10, 64)
		cstime, _ := strconv.ParseInt(fields[14], 10, 64)
		utime, stime = utime+cutime, stime+cstime
	}
	return time.Duration(utime+stime) * time.Second / clockTick
}

// postgresCPU is the CPU time every postgres process on this machine has
// used: the backends serving Guardian, and the WAL writer and checkpointer
// that its commits keep busy. The bench runs nothing else against it. A
// backend that has exited (pgbench's, at the end of its run; a pool's
// closed connection) counts through the postmaster that waited for it.
func postgresCPU() time.Duration {
	var total time.Duration
	stats, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, comm := range stats {
		b, err := os.ReadFile(comm)
		if err != nil || !strings.HasPrefix(string(b), "postgres") {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(comm)))
		total += cpuTimes(pid, true)
	}
	return total
}
