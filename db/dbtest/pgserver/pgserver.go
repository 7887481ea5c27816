// Package pgserver makes private PostgreSQL servers on loopback from the
// machine's server binaries (`pg_config --bindir`): initdb, settings
// appended to postgresql.conf, pg_ctl to start and stop. Postgres refuses
// to run as root, so as root the binaries run as the postgres user and the
// files made for them are given to it.
//
// It reports errors rather than failing a test, so that both the tests'
// servers (db/dbtest/replica) and the bench's (e2e/bench, -only split)
// are made by the same code; each says how its caller fails.
package pgserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Binaries are the machine's PostgreSQL server binaries and the user
// they run as.
type Binaries struct {
	// Dir is `pg_config --bindir`.
	Dir string
	// runAs prefixes every command when this process is root; owner is
	// then the postgres user's uid and gid.
	runAs []string
	owner *[2]int
}

// Find locates the server binaries and checks that each of tools is among
// them. Its error says how to install what is missing.
func Find(tools ...string) (*Binaries, error) {
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL's server binaries and pg_config are needed: "+
			"apt-get install -y postgresql postgresql-server-dev-all (pg_config: %v)", err)
	}
	b := &Binaries{Dir: strings.TrimSpace(string(out))}
	for _, tool := range tools {
		if _, err := os.Stat(filepath.Join(b.Dir, tool)); err != nil {
			return nil, fmt.Errorf("%s is needed in %s: apt-get install -y postgresql", tool, b.Dir)
		}
	}
	uid, gid, root, err := Owner()
	if err != nil {
		return nil, fmt.Errorf("the servers: %w", err)
	}
	if root {
		b.owner = &[2]int{uid, gid}
		b.runAs = []string{"runuser", "-u", "postgres", "--"}
	}
	return b, nil
}

// Owner says, when this process runs as root, which uid and gid the
// servers it starts run as: Postgres and PgBouncer refuse root, so their
// files belong to the postgres user and they run as it. root is false for
// any other user, who runs them as itself.
func Owner() (uid, gid int, root bool, err error) {
	if os.Geteuid() != 0 {
		return 0, 0, false, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, false, fmt.Errorf("running as root, they run as the postgres user, and there is none: %w", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid, true, nil
}

// Command is the command line that runs tool with args as the servers'
// user, after prefix (taskset, say, whose affinity the tool and what it
// forks inherit).
func (b *Binaries) Command(prefix []string, tool string, args ...string) []string {
	line := append(append([]string{}, prefix...), b.runAs...)
	return append(append(line, filepath.Join(b.Dir, tool)), args...)
}

// Run runs tool with args as the servers' user; its error carries the
// tool's output.
func (b *Binaries) Run(prefix []string, tool string, args ...string) error {
	line := b.Command(prefix, tool, args...)
	cmd := exec.Command(line[0], line[1:]...)
	cmd.Dir = os.TempDir() // the postgres user may not enter the caller's directory
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
	}
	return nil
}

// Own gives a path made by this process to the servers' user.
func (b *Binaries) Own(path string) error {
	if b.owner == nil {
		return nil
	}
	return os.Chown(path, b.owner[0], b.owner[1])
}

// Init makes a new cluster in dir, trusting local connections as
// postgres.
func (b *Binaries) Init(dir string) error {
	return b.Run(nil, "initdb", "-D", dir, "--auth=trust", "--username=postgres", "--no-sync", "--no-instructions")
}

// Start starts the cluster in dir, logging to logFile, and waits until it
// accepts connections.
func (b *Binaries) Start(prefix []string, dir, logFile string) error {
	return b.Run(prefix, "pg_ctl", "-D", dir, "-l", logFile, "-w", "-t", "60", "start")
}

// Stop stops the cluster in dir in pg_ctl's mode (fast, immediate).
func (b *Binaries) Stop(dir, mode string) error {
	return b.Run(nil, "pg_ctl", "-D", dir, "-m", mode, "-w", "stop")
}

// Loopback are the settings every private server has: loopback only, its
// own port, and its sockets in dir.
func Loopback(port int, dir string) map[string]string {
	return map[string]string{
		"listen_addresses":        Quote("127.0.0.1"),
		"port":                    strconv.Itoa(port),
		"unix_socket_directories": Quote(dir),
		"logging_collector":       "off",
	}
}

// Configure appends settings, values as postgresql.conf spells them, to
// the cluster's postgresql.conf under a comment saying who wrote them.
// Later settings of a name win, so merged maps override Loopback's.
func Configure(dir, who string, settings ...map[string]string) error {
	merged := map[string]string{}
	for _, s := range settings {
		for k, v := range s {
			merged[k] = v
		}
	}
	names := make([]string, 0, len(merged))
	for k := range merged {
		names = append(names, k)
	}
	sort.Strings(names)
	var conf strings.Builder
	fmt.Fprintf(&conf, "\n# %s\n", who)
	for _, k := range names {
		fmt.Fprintf(&conf, "%s = %s\n", k, merged[k])
	}
	f, err := os.OpenFile(filepath.Join(dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(conf.String())
	return errors.Join(err, f.Close())
}

// Quote is a string setting's value, quoted as postgresql.conf reads it.
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// URL is a connection string to database on the private server at port.
func URL(port int, database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", port, database)
}

// handedOut are the ports FreePort has returned in this process: the
// kernel may offer a port again once its probe closes, before the server
// it was meant for has bound it.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a loopback TCP port that was free at the time of the
// call and that it has not returned before, for a server to listen on.
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
}
