package hbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/keytab"
)

// secureEnv is the Kerberized HBase of testenv/services.sh's secure mode, as its `env` prints it.
type secureEnv struct {
	zk, krb5, principal, keytab, staleKeytab, shortlivedKeytab, serverPrincipal string
}

// secureHBase returns the secure test cluster, skipping the test when it is not running (failing it
// when ABACUS_REQUIRE_SECURE_HBASE=1, as testenv/run-tests.sh sets in its Kerberos stage).
func secureHBase(t *testing.T) secureEnv {
	t.Helper()
	e := secureEnv{
		zk:               os.Getenv(gate.EnvSecureHBaseZK),
		krb5:             os.Getenv(gate.EnvKrb5Conf),
		principal:        os.Getenv(gate.EnvKrbPrincipal),
		keytab:           os.Getenv(gate.EnvKrbKeytab),
		staleKeytab:      os.Getenv("ABACUS_KRB_STALE_KEYTAB"),
		shortlivedKeytab: os.Getenv("ABACUS_KRB_SHORTLIVED_KEYTAB"),
		serverPrincipal:  os.Getenv(gate.EnvKrbServerPrincipal),
	}
	const hint = "start it with SERVICES=\"kdc secure-hbase\" testenv/services.sh start and " +
		"eval \"$(SERVICES=\"kdc secure-hbase\" testenv/services.sh env)\""
	var msg string
	if e.zk == "" || e.krb5 == "" || e.keytab == "" {
		msg = "no Kerberized HBase given (ABACUS_SECURE_HBASE_ZK, ABACUS_KRB5_CONF, ABACUS_KRB_KEYTAB unset): " + hint
	} else if c, err := net.DialTimeout("tcp", e.zk, 2*time.Second); err != nil {
		msg = fmt.Sprintf("Kerberized HBase's ZooKeeper not reachable at %s: %v; %s", e.zk, err, hint)
	} else {
		c.Close()
		return e
	}
	if os.Getenv(gate.EnvRequireSecure) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return e
}

// config is a Kerberos client configuration for the secure cluster with the client keytab.
func (e secureEnv) config() Config {
	return Config{ZooKeeper: e.zk, Auth: AuthKerberos, Kerberos: KerberosConfig{
		Principal: e.principal, Keytab: e.keytab, Krb5Conf: e.krb5, ServerPrincipal: e.serverPrincipal,
	}}
}

// negotiated returns the protection of every open connection of c.
func negotiated(c *Client) map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for k, cn := range c.conns {
		sc, ok := cn.nc.(*saslConn)
		if !ok {
			out[k] = "none"
			continue
		}
		out[k] = qopName(sc.g.qop)
	}
	return out
}

// roundTrip creates a table, writes rows (one of them big, so that wrap tokens span many reads),
// reads them back with Get and Scan, and drops the table.
func roundTrip(t *testing.T, c *Client, name string) {
	t.Helper()
	ctx := testContext(t)
	table := fmt.Sprintf("krbtest_%s_%d", name, time.Now().UnixNano())
	if err := c.Admin().CreateTable(ctx, TableSpec{Name: table, Families: fam("f")}); err != nil {
		t.Fatalf("create table %s: %v", table, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Admin().DisableTable(ctx, table); err != nil {
			t.Errorf("disable %s: %v", table, err)
			return
		}
		if err := c.Admin().DeleteTable(ctx, table); err != nil {
			t.Errorf("delete %s: %v", table, err)
		}
	}()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	var muts []*Mutation
	for i := range 200 {
		muts = append(muts, NewPut(table, fmt.Appendf(nil, "row%03d", i)).Add("f", []byte("q"), int64(1000+i), fmt.Appendf(nil, "v%d", i)))
	}
	muts = append(muts, NewPut(table, []byte("row999")).Add("f", []byte("big"), 7, big))
	if err := c.Apply(ctx, muts); err != nil {
		t.Fatalf("apply: %v", err)
	}
	res, err := c.Get(ctx, Get{Table: table, Row: []byte("row042")})
	if err != nil || len(res.Cells) != 1 || string(res.Cells[0].Value) != "v42" || res.Cells[0].Timestamp != 1042 {
		t.Fatalf("get row042: %v %+v", err, res)
	}
	res, err = c.Get(ctx, Get{Table: table, Row: []byte("row999")})
	if err != nil || len(res.Cells) != 1 || !bytes.Equal(res.Cells[0].Value, big) {
		t.Fatalf("get of the 1 MiB cell: %v, %d cells", err, len(res.Cells))
	}
	// Many calls in flight on one connection: requests and responses pipelined, each write and
	// each response its own wrap token when the protection wraps.
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				n := (g*20 + i) % 200
				row := fmt.Sprintf("row%03d", n)
				res, err := c.Get(ctx, Get{Table: table, Row: []byte(row)})
				if err != nil || len(res.Cells) != 1 || string(res.Cells[0].Value) != fmt.Sprintf("v%d", n) {
					errc <- fmt.Errorf("concurrent get %s: %v %+v", row, err, res)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	sc := c.Scan(Scan{Table: table, Caching: 50})
	defer sc.Close()
	n := 0
	for {
		r, err := sc.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		if n < 200 && string(r.Row()) != fmt.Sprintf("row%03d", n) {
			t.Fatalf("scan row %d is %q", n, r.Row())
		}
		n++
	}
	if n != 201 {
		t.Fatalf("scan returned %d rows, want 201", n)
	}
}

// TestKerberosKeytabRoundTrip logs in from the client keytab and creates a table, writes, reads and
// scans on the Kerberized cluster; the server offers every protection and the client, asking for
// none in particular, takes authentication only.
func TestKerberosKeytabRoundTrip(t *testing.T) {
	e := secureHBase(t)
	c, err := NewClient(testContext(t), e.config())
	if err != nil {
		t.Fatalf("new client with keytab %s: %v", e.keytab, err)
	}
	defer c.Close()
	roundTrip(t, c, "keytab")
	qops := negotiated(c)
	if len(qops) < 2 { // ClientService on the region server and MasterService at least
		t.Fatalf("connections after a round trip: %v", qops)
	}
	for k, q := range qops {
		if q != ProtectionAuthentication {
			t.Errorf("connection %s negotiated %s, want authentication (the weakest the server offers)", k, q)
		}
	}
}

// TestKerberosProtection runs the round trip with integrity (signed wrap tokens) and privacy
// (encrypted wrap tokens) asked for, and checks every connection negotiated it.
func TestKerberosProtection(t *testing.T) {
	e := secureHBase(t)
	for _, p := range []string{ProtectionIntegrity, ProtectionPrivacy} {
		t.Run(p, func(t *testing.T) {
			cfg := e.config()
			cfg.Kerberos.Protection = p
			c, err := NewClient(testContext(t), cfg)
			if err != nil {
				t.Fatalf("new client with Protection %s: %v", p, err)
			}
			defer c.Close()
			roundTrip(t, c, p)
			for k, q := range negotiated(c) {
				if q != p {
					t.Errorf("connection %s negotiated %s, want %s", k, q, p)
				}
			}
		})
	}
}

// kinit fills a fresh ticket cache from keytab with MIT's kinit, as a user would.
func kinit(t *testing.T, e secureEnv, principal, kt string) string {
	t.Helper()
	bin, err := exec.LookPath("kinit")
	if err != nil {
		t.Fatalf("kinit not found (Debian package krb5-user, which testenv/services.sh installs with the KDC): %v", err)
	}
	cache := filepath.Join(t.TempDir(), "ccache")
	cmd := exec.Command(bin, "-k", "-t", kt, principal)
	cmd.Env = append(os.Environ(), "KRB5_CONFIG="+e.krb5, "KRB5CCNAME=FILE:"+cache)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kinit -k -t %s %s: %v\n%s", kt, principal, err, out)
	}
	return cache
}

// TestKerberosTicketCache authenticates from a ticket cache made by kinit, with no keytab, and
// checks the errors for a cache of another principal and a missing cache.
func TestKerberosTicketCache(t *testing.T) {
	e := secureHBase(t)
	cache := kinit(t, e, e.principal, e.keytab)
	cfg := Config{ZooKeeper: e.zk, Auth: AuthKerberos, Kerberos: KerberosConfig{TicketCache: cache, Krb5Conf: e.krb5, ServerPrincipal: e.serverPrincipal}}
	c, err := NewClient(testContext(t), cfg)
	if err != nil {
		t.Fatalf("new client from ticket cache: %v", err)
	}
	roundTrip(t, c, "ccache")
	c.Close()

	cfg.Kerberos.Principal = "someone-else@ABACUS.TEST"
	_, err = NewClient(testContext(t), cfg)
	if err == nil || !strings.Contains(err.Error(), "Config.Kerberos.Principal") || !strings.Contains(err.Error(), "Config.Kerberos.TicketCache") {
		t.Fatalf("ticket cache of another principal: %v, want an error naming Config.Kerberos.Principal and Config.Kerberos.TicketCache", err)
	}
	cfg.Kerberos.Principal = ""
	cfg.Kerberos.TicketCache = filepath.Join(t.TempDir(), "nothing-here")
	_, err = NewClient(testContext(t), cfg)
	if err == nil || !strings.Contains(err.Error(), "Config.Kerberos.TicketCache") || !strings.Contains(err.Error(), "kinit") {
		t.Fatalf("missing ticket cache: %v, want an error naming Config.Kerberos.TicketCache and kinit", err)
	}
}

// TestKerberosNoCredentialsRefused: a client without Kerberos is refused by the secure cluster at
// once, with the server's reason and what to set; the error is ErrAuthentication and retriable (a
// sink pauses, it never dead-letters data because credentials are missing), and the client's own
// retry loops do not spin on it.
func TestKerberosNoCredentialsRefused(t *testing.T) {
	e := secureHBase(t)
	ctx := testContext(t)
	// NewClient of a simple client only reads ZooKeeper, whose HBase znodes are world-readable.
	c, err := NewClient(ctx, Config{ZooKeeper: e.zk})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Admin().ListTables(ctx, "")
	if err == nil {
		t.Fatal("list tables without credentials succeeded")
	}
	if !errors.Is(err, ErrAuthentication) || !strings.Contains(err.Error(), "Authentication is required") ||
		!strings.Contains(err.Error(), "set Config.Auth to kerberos") {
		t.Fatalf("list tables without credentials: %v, want ErrAuthentication with the server's reason and the setting", err)
	}
	if _, err := c.Get(ctx, Get{Table: "hbase:meta", Row: []byte("x")}); !errors.Is(err, ErrAuthentication) {
		t.Fatalf("get without credentials: %v, want ErrAuthentication", err)
	}
	err = c.Apply(ctx, []*Mutation{NewPut("hbase:meta", []byte("never")).Add("info", []byte("q"), 1, []byte("v"))})
	var be *BatchError
	if !errors.As(err, &be) || !errors.Is(be.Errs[0], ErrAuthentication) || !IsRetriable(be.Errs[0]) {
		t.Fatalf("apply without credentials: %v, want a retriable ErrAuthentication", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("three refused calls took %v: the client retried what credentials must fix", took)
	}
	t.Logf("refused in %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// TestKerberosBadCredentials: a stale keytab, a keytab without the principal, an unknown principal
// and an unknown server principal each fail NewClient at once with the setting named.
func TestKerberosBadCredentials(t *testing.T) {
	e := secureHBase(t)
	ghost := filepath.Join(t.TempDir(), "ghost.keytab")
	kt := keytab.New()
	if err := kt.AddEntry("ghost", "ABACUS.TEST", "no-such-user", time.Now(), 1, etypeID.AES256_CTS_HMAC_SHA1_96); err != nil {
		t.Fatal(err)
	}
	b, err := kt.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ghost, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mod    func(*Config)
		expect []string
	}{
		{"stale keytab", func(c *Config) { c.Kerberos.Keytab = e.staleKeytab },
			[]string{"Config.Kerberos.Keytab", e.staleKeytab, "not the current keys"}},
		{"keytab of another principal", func(c *Config) { c.Kerberos.Principal = "shortlived@ABACUS.TEST" },
			[]string{"Config.Kerberos.Keytab", "holds no key for Config.Kerberos.Principal shortlived@ABACUS.TEST"}},
		{"unknown principal", func(c *Config) { c.Kerberos.Principal, c.Kerberos.Keytab = "ghost@ABACUS.TEST", ghost },
			[]string{"Config.Kerberos.Principal", "does not know the client principal ghost@ABACUS.TEST"}},
		{"unknown server principal", func(c *Config) { c.Kerberos.ServerPrincipal = "hbase/_HOST.wrong@ABACUS.TEST" },
			[]string{"Config.Kerberos.ServerPrincipal", "hbase/127.0.0.1.wrong@ABACUS.TEST"}},
		{"missing keytab", func(c *Config) { c.Kerberos.Keytab = "/nonexistent/client.keytab" },
			[]string{"Config.Kerberos.Keytab /nonexistent/client.keytab"}},
		{"missing krb5.conf", func(c *Config) { c.Kerberos.Krb5Conf = "/nonexistent/krb5.conf" },
			[]string{"Config.Kerberos.Krb5Conf /nonexistent/krb5.conf"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config()
			tc.mod(&cfg)
			start := time.Now()
			c, err := NewClient(testContext(t), cfg)
			took := time.Since(start)
			if err == nil {
				c.Close()
				t.Fatal("NewClient succeeded")
			}
			for _, s := range tc.expect {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not say %q: %v", s, err)
				}
			}
			if !errors.Is(err, ErrAuthentication) {
				t.Errorf("error is not ErrAuthentication: %v", err)
			}
			if took > 5*time.Second {
				t.Errorf("took %v to fail, want a quick failure", took)
			}
			t.Logf("%v: %v", took.Round(time.Millisecond), err)
		})
	}
}

// TestKerberosZooKeeperWorldReadable: the secure cluster's ZooKeeper authenticates HBase by SASL
// and protects its znodes, but the two the client reads (master, meta-region-server) stay readable
// by anyone: the client needs no ZooKeeper SASL, while other znodes refuse it.
func TestKerberosZooKeeperWorldReadable(t *testing.T) {
	e := secureHBase(t)
	zc, _, err := zk.Connect([]string{e.zk}, 5*time.Second, zk.WithLogInfo(false), zk.WithLogger(discardLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	for _, node := range []string{"/hbase/master", "/hbase/meta-region-server"} {
		acl, _, err := zc.GetACL(node)
		if err != nil {
			t.Fatalf("acl of %s: %v", node, err)
		}
		world, sasl := false, false
		for _, a := range acl {
			world = world || (a.Scheme == "world" && a.ID == "anyone" && a.Perms == zk.PermRead)
			sasl = sasl || (a.Scheme == "sasl" && a.ID == "hbase" && a.Perms == zk.PermAll)
		}
		if !world || !sasl {
			t.Fatalf("acl of %s is %v, want world:anyone read and sasl:hbase all", node, acl)
		}
	}
	if _, _, err := zc.Get("/hbase/running"); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("read of /hbase/running without SASL: %v, want zk.ErrNoAuth (the ZooKeeper is not secured)", err)
	}
	sn, err := ZooKeeperLocator{Quorum: e.zk}.Master(testContext(t))
	if err != nil || sn.Host == "" {
		t.Fatalf("master from the secure ZooKeeper: %v %v", sn, err)
	}
}

// TestKerberosRenewal: with 1-minute tickets (principal shortlived), a long-running client keeps
// opening new connections after its first tickets expired. From a keytab the login renews itself
// (three rounds, a minute apart). From a ticket cache the client renews the cached ticket while it is
// renewable, and re-reads the cache file when it changes (kinit, k5start): a broken file is
// reported with the setting named, a fresh one is taken up.
func TestKerberosRenewal(t *testing.T) {
	t.Parallel() // it mostly sleeps: let the other Kerberos tests run meanwhile
	e := secureHBase(t)
	if e.shortlivedKeytab == "" {
		t.Fatal("ABACUS_KRB_SHORTLIVED_KEYTAB unset: testenv/services.sh env prints it")
	}
	const principal = "shortlived@ABACUS.TEST"
	t.Run("keytab", func(t *testing.T) {
		t.Parallel()
		cfg := e.config()
		cfg.Kerberos.Principal, cfg.Kerberos.Keytab = principal, e.shortlivedKeytab
		c := renewalClient(t, cfg)
		for round := range 3 {
			if round > 0 {
				time.Sleep(65 * time.Second) // past the 1-minute lifetime of every ticket held
			}
			if err := freshConnections(c); err != nil {
				t.Fatalf("round %d (%d s after login): %v", round, round*65, err)
			}
		}
	})
	t.Run("ticket cache", func(t *testing.T) {
		t.Parallel()
		cache := kinit(t, e, principal, e.shortlivedKeytab)
		cfg := Config{ZooKeeper: e.zk, Auth: AuthKerberos, Kerberos: KerberosConfig{TicketCache: cache, Krb5Conf: e.krb5, ServerPrincipal: e.serverPrincipal}}
		c := renewalClient(t, cfg)
		if err := freshConnections(c); err != nil {
			t.Fatalf("first round: %v", err)
		}
		time.Sleep(65 * time.Second)
		if err := freshConnections(c); err != nil {
			t.Fatalf("after the cached ticket's minute (the client must renew it): %v", err)
		}
		replace := func(b []byte) {
			if err := os.WriteFile(cache+".new", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(cache+".new", cache); err != nil {
				t.Fatal(err)
			}
		}
		replace([]byte("not a ticket cache"))
		err := freshConnections(c)
		if !errors.Is(err, ErrAuthentication) || !strings.Contains(err.Error(), "Config.Kerberos.TicketCache "+cache) {
			t.Fatalf("with the cache file broken: %v, want ErrAuthentication naming Config.Kerberos.TicketCache", err)
		}
		t.Logf("broken ticket cache: %v", err)
		b, err := os.ReadFile(kinit(t, e, principal, e.shortlivedKeytab))
		if err != nil {
			t.Fatal(err)
		}
		replace(b) // what k5start or a cron'd kinit does: a fresh ticket in the same file
		if err := freshConnections(c); err != nil {
			t.Fatalf("after kinit refreshed the cache: %v", err)
		}
	})
}

func renewalClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	cfg.MaxRounds = 2
	c, err := NewClient(testContext(t), cfg)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// freshConnections drops every connection of c, so that the calls that follow need new service
// tickets, and makes a master call and a region server call.
func freshConnections(c *Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.mu.Lock()
	var addrs []string
	for _, cn := range c.conns {
		addrs = append(addrs, cn.addr)
	}
	c.mu.Unlock()
	for _, a := range addrs {
		c.dropConn(a)
	}
	if _, err := c.Admin().ListTables(ctx, ""); err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	if _, err := c.Get(ctx, Get{Table: "hbase:meta", Row: []byte("hbase:namespace")}); err != nil {
		return fmt.Errorf("get: %w", err)
	}
	return nil
}

// TestKerberosClockSkew runs a second KDC of the test realm (same database) whose clock is ten
// minutes ahead, under Debian's faketime (Go reads the clock through the vDSO, so the KDC is the
// side whose clock can be moved), and logs in through it: NewClient must fail at once, saying the
// clocks differ, rather than hang or blame the keytab.
func TestKerberosClockSkew(t *testing.T) {
	e := secureHBase(t)
	faketime, err := exec.LookPath("faketime")
	if err != nil {
		t.Fatalf("faketime not found (Debian package faketime, which testenv/services.sh installs with the KDC): %v", err)
	}
	krb5kdc, err := exec.LookPath("krb5kdc")
	if err != nil {
		if krb5kdc, err = exec.LookPath("/usr/sbin/krb5kdc"); err != nil {
			t.Fatalf("krb5kdc not found: %v", err)
		}
	}
	realmDir := filepath.Dir(e.krb5)
	kdcConf, err := os.ReadFile(filepath.Join(realmDir, "kdc.conf"))
	if err != nil {
		t.Fatalf("kdc.conf of the test realm: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	oldPort := ""
	for _, line := range strings.Split(string(kdcConf), "\n") {
		if _, v, ok := strings.Cut(line, "kdc_tcp_listen = 127.0.0.1:"); ok {
			oldPort = strings.TrimSpace(v)
		}
	}
	if oldPort == "" {
		t.Fatalf("no kdc_tcp_listen in %s/kdc.conf", realmDir)
	}
	swap := func(b []byte) []byte {
		return []byte(strings.ReplaceAll(strings.ReplaceAll(string(b), "127.0.0.1:"+oldPort, fmt.Sprintf("127.0.0.1:%d", port)),
			filepath.Join(realmDir, "kdc.log"), filepath.Join(dir, "kdc.log")))
	}
	krb5, err := os.ReadFile(e.krb5)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kdc.conf"), swap(kdcConf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "krb5.conf"), swap(krb5), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(faketime, "-f", "+600s", krb5kdc, "-n")
	cmd.Env = append(os.Environ(), "KRB5_CONFIG="+filepath.Join(dir, "krb5.conf"), "KRB5_KDC_PROFILE="+filepath.Join(dir, "kdc.conf"))
	// faketime runs krb5kdc as its child: a process group of their own lets the cleanup end both.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logPath := filepath.Join(dir, "kdc.stdout")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the skewed KDC: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("skewed KDC not listening on %d: %s", port, b)
		}
		time.Sleep(50 * time.Millisecond)
	}

	cfg := e.config()
	cfg.Kerberos.Krb5Conf = filepath.Join(dir, "krb5.conf")
	start := time.Now()
	c, err := NewClient(testContext(t), cfg)
	took := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatal("NewClient succeeded through a KDC ten minutes ahead")
	}
	if !errors.Is(err, ErrAuthentication) || !strings.Contains(err.Error(), "clocks of this host and the KDC differ") {
		t.Fatalf("skewed KDC: %v, want ErrAuthentication saying the clocks differ", err)
	}
	if took > 5*time.Second {
		t.Fatalf("took %v to fail", took)
	}
	t.Logf("%v: %v", took.Round(time.Millisecond), err)
}
