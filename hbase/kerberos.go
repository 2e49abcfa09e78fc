package hbase

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	krbclient "github.com/jcmturner/gokrb5/v8/client"
	krbconfig "github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"
)

// Authentication methods for Config.Auth, as a cluster's hbase.security.authentication names them.
const (
	// AuthSimple trusts the user name the client states (Config.User). It is the default.
	AuthSimple = "simple"
	// AuthKerberos authenticates with Kerberos through SASL GSSAPI, with Config.Kerberos.
	AuthKerberos = "kerberos"
)

// Protection levels for KerberosConfig.Protection, as a cluster's hbase.rpc.protection names them.
const (
	// ProtectionAuthentication only authenticates: the traffic is neither signed nor encrypted.
	ProtectionAuthentication = "authentication"
	// ProtectionIntegrity signs every message after authentication (SASL auth-int).
	ProtectionIntegrity = "integrity"
	// ProtectionPrivacy encrypts every message after authentication (SASL auth-conf).
	ProtectionPrivacy = "privacy"
)

// KerberosConfig holds the Kerberos settings of a client whose Config.Auth is AuthKerberos.
// Errors about them name the field (e.g. "Config.Kerberos.Keytab"), so callers that map their own settings
// onto these fields can say which one is wrong.
type KerberosConfig struct {
	// Principal is the client's principal, "name@REALM" or "name/host@REALM" (no realm: the
	// krb5.conf default realm). Required with Keytab; with a ticket cache it defaults to the cache's
	// principal and, when set, must match it.
	Principal string
	// Keytab is the path of a keytab holding Principal's keys. The client then logs in by itself
	// and renews its tickets for as long as it runs. When empty the ticket cache is used instead.
	Keytab string
	// TicketCache is the path of a credential cache made by kinit, used when Keytab is empty:
	// $KRB5CCNAME (FILE: caches only), else /tmp/krb5cc_<uid>. The client renews the ticket it
	// read from there (in memory) until the ticket's renew-till time, and re-reads the file when
	// it changes, so a long-running process lives on as long as something (kinit -R, k5start)
	// keeps the cache fresh; a keytab needs nothing of the kind.
	TicketCache string
	// Krb5Conf is the path of the krb5.conf naming the realms and their KDCs: $KRB5_CONFIG, else
	// /etc/krb5.conf.
	Krb5Conf string
	// ServerPrincipal is the principal of masters and region servers, with _HOST standing for
	// the host name a server registered under (lower-cased), as the cluster's
	// hbase.regionserver.kerberos.principal and hbase.master.kerberos.principal hold it:
	// "hbase/_HOST@REALM". Default "hbase/_HOST@" + the client's realm.
	ServerPrincipal string
	// Protection is the least protection the client accepts for its traffic: "" (whatever the
	// server asks for), ProtectionAuthentication, ProtectionIntegrity or ProtectionPrivacy. Among
	// the levels the server offers (its hbase.rpc.protection), the client takes the weakest one
	// that is at least this, because each step costs CPU on both sides.
	Protection string
}

// hostPlaceholder stands for a server's host name in KerberosConfig.ServerPrincipal.
const hostPlaceholder = "_HOST"

// validateAuth checks the Auth and Kerberos fields for Validate and names the one that is wrong. It
// reads no file and asks no KDC: NewClient's login does, and names the setting when it fails.
func (c *Config) validateAuth() error {
	switch c.Auth {
	case "", AuthSimple:
		k := c.Kerberos
		if k.Principal != "" || k.Keytab != "" || k.TicketCache != "" || k.ServerPrincipal != "" {
			return errInvalid("config", "Config.Kerberos settings are given but Config.Auth is %q: set it to %q to use them", c.Auth, AuthKerberos)
		}
		return nil
	case AuthKerberos:
	default:
		return errInvalid("config", "Config.Auth: unknown authentication %q (want %q or %q)", c.Auth, AuthSimple, AuthKerberos)
	}
	k := c.Kerberos
	if k.Keytab != "" && k.Principal == "" {
		return errInvalid("config", "Config.Kerberos.Principal: required with Config.Kerberos.Keytab %s", k.Keytab)
	}
	if k.Keytab != "" && k.TicketCache != "" {
		return errInvalid("config", "Config.Kerberos.Keytab and Config.Kerberos.TicketCache are both set: give one")
	}
	if strings.Count(k.Principal, "@") > 1 {
		return errInvalid("config", "Config.Kerberos.Principal: %q has more than one @", k.Principal)
	}
	if sp := k.ServerPrincipal; sp != "" {
		name, _, _ := strings.Cut(sp, "@")
		if name == "" || strings.Count(sp, "@") > 1 || strings.Count(name, "/") > 1 {
			return errInvalid("config", "Config.Kerberos.ServerPrincipal: %q is not service/host@REALM (e.g. hbase/_HOST@EXAMPLE.COM)", sp)
		}
	}
	switch k.Protection {
	case "", ProtectionAuthentication, ProtectionIntegrity, ProtectionPrivacy:
	default:
		return errInvalid("config", "Config.Kerberos.Protection: unknown protection %q (want %q, %q or %q)",
			k.Protection, ProtectionAuthentication, ProtectionIntegrity, ProtectionPrivacy)
	}
	return nil
}

// kerberosAuth is a client's Kerberos login: its TGT (from the keytab or the ticket cache) and the
// service tickets it gets for each server. It is shared by all connections of a Client.
type kerberosAuth struct {
	cfg       KerberosConfig
	krb5      *krbconfig.Config
	principal types.PrincipalName
	realm     string
	cache     string // ticket cache path when logging in from one

	mu       sync.Mutex
	cl       *krbclient.Client
	cacheMod time.Time // modification time of the ticket cache when it was read
}

// newKerberosAuth loads krb5.conf and the credentials and, for a keytab, logs in at once, so that
// a wrong keytab, an unknown principal or an unreachable KDC fails NewClient with the setting named
// instead of failing every connection later.
func newKerberosAuth(ctx context.Context, cfg KerberosConfig) (*kerberosAuth, error) {
	if cfg.Krb5Conf == "" {
		cfg.Krb5Conf = os.Getenv("KRB5_CONFIG")
		if cfg.Krb5Conf == "" {
			cfg.Krb5Conf = "/etc/krb5.conf"
		}
	}
	kc, err := krbconfig.Load(cfg.Krb5Conf)
	if err != nil {
		return nil, fmt.Errorf("Config.Kerberos.Krb5Conf %s: %w", cfg.Krb5Conf, err)
	}
	a := &kerberosAuth{cfg: cfg, krb5: kc}
	if cfg.Keytab != "" {
		name, realm := splitPrincipal(cfg.Principal, kc.LibDefaults.DefaultRealm)
		if realm == "" {
			return nil, fmt.Errorf("Config.Kerberos.Principal %q names no realm and Config.Kerberos.Krb5Conf %s has no default_realm", cfg.Principal, cfg.Krb5Conf)
		}
		a.principal, a.realm = types.NewPrincipalName(nametype.KRB_NT_PRINCIPAL, name), realm
		kt, err := keytab.Load(cfg.Keytab)
		if err != nil {
			return nil, fmt.Errorf("Config.Kerberos.Keytab %s: %w", cfg.Keytab, err)
		}
		if !keytabHolds(kt, a.principal, realm) {
			return nil, fmt.Errorf("Config.Kerberos.Keytab %s holds no key for Config.Kerberos.Principal %s (it holds: %s)",
				cfg.Keytab, a.principalString(), keytabPrincipals(kt))
		}
		a.cl = krbclient.NewWithKeytab(name, realm, kt, kc, krbclient.DisablePAFXFAST(true))
		if err := a.kdc(ctx, a.cl.Login); err != nil {
			a.cl.Destroy()
			return nil, a.explain("log in", err)
		}
		return a, nil
	}
	a.cache = cfg.TicketCache
	if a.cache == "" {
		a.cache = os.Getenv("KRB5CCNAME")
		if a.cache == "" {
			a.cache = fmt.Sprintf("/tmp/krb5cc_%d", os.Getuid())
		}
	}
	if strings.Contains(a.cache, ":") && !strings.HasPrefix(a.cache, "FILE:") {
		return nil, fmt.Errorf("Config.Kerberos.TicketCache %s: only FILE: ticket caches can be read (set KRB5CCNAME=FILE:/path for kinit, or use Config.Kerberos.Keytab)", a.cache)
	}
	a.cache = strings.TrimPrefix(a.cache, "FILE:")
	if err := a.loadCache(); err != nil {
		return nil, err
	}
	return a, nil
}

// loadCache (re)reads the ticket cache. Caller holds mu, or is the constructor.
func (a *kerberosAuth) loadCache() error {
	st, err := os.Stat(a.cache)
	if err != nil {
		return fmt.Errorf("Config.Kerberos.TicketCache %s: %w (run kinit, or set Config.Kerberos.Keytab)", a.cache, err)
	}
	cc, err := credentials.LoadCCache(a.cache)
	if err != nil {
		return fmt.Errorf("Config.Kerberos.TicketCache %s: %w", a.cache, err)
	}
	p := cc.DefaultPrincipal
	if a.cfg.Principal != "" {
		name, realm := splitPrincipal(a.cfg.Principal, a.krb5.LibDefaults.DefaultRealm)
		if name != p.PrincipalName.PrincipalNameString() || realm != p.Realm {
			return fmt.Errorf("Config.Kerberos.TicketCache %s holds tickets of %s@%s, not of Config.Kerberos.Principal %s",
				a.cache, p.PrincipalName.PrincipalNameString(), p.Realm, a.cfg.Principal)
		}
	}
	cl, err := krbclient.NewFromCCache(cc, a.krb5, krbclient.DisablePAFXFAST(true))
	if err != nil {
		return fmt.Errorf("Config.Kerberos.TicketCache %s: %w (run kinit again)", a.cache, err)
	}
	if tgtExpired(cc, p.Realm) {
		cl.Destroy()
		return fmt.Errorf("Config.Kerberos.TicketCache %s: the ticket of %s@%s has expired (run kinit again)", a.cache, p.PrincipalName.PrincipalNameString(), p.Realm)
	}
	if a.cl != nil {
		a.cl.Destroy()
	}
	a.cl, a.principal, a.realm, a.cacheMod = cl, p.PrincipalName, p.Realm, st.ModTime()
	return nil
}

// tgtExpired reports whether the cache's ticket-granting ticket for realm is past its end time.
func tgtExpired(cc *credentials.CCache, realm string) bool {
	tgs := types.PrincipalName{NameType: nametype.KRB_NT_SRV_INST, NameString: []string{"krbtgt", realm}}
	c, ok := cc.GetEntry(tgs)
	return !ok || time.Now().After(c.EndTime)
}

// principalString is the client principal as name@REALM: the effective user of every connection.
func (a *kerberosAuth) principalString() string {
	return a.principal.PrincipalNameString() + "@" + a.realm
}

// serverPrincipal turns the ServerPrincipal pattern into the service name and realm of the server
// on host: "hbase/_HOST@R" and "RS1.example.com" give "hbase/rs1.example.com", "R".
func (a *kerberosAuth) serverPrincipal(host string) (spn, realm string) {
	pattern := a.cfg.ServerPrincipal
	if pattern == "" {
		pattern = "hbase/" + hostPlaceholder
	}
	name, realm := splitPrincipal(pattern, a.realm)
	return strings.ReplaceAll(name, hostPlaceholder, strings.ToLower(host)), realm
}

// serviceTicket returns a ticket and session key for the server on host, from the client's cache
// when one is still valid, else from the KDC. gokrb5 renews the TGT of a keytab login before it
// expires; a ticket cache is re-read when its file changed or its ticket ran out.
func (a *kerberosAuth) serviceTicket(ctx context.Context, host string) (messages.Ticket, types.EncryptionKey, string, error) {
	spn, realm := a.serverPrincipal(host)
	full := spn + "@" + realm
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache != "" {
		if st, err := os.Stat(a.cache); err == nil && !st.ModTime().Equal(a.cacheMod) {
			if err := a.loadCache(); err != nil {
				return messages.Ticket{}, types.EncryptionKey{}, full, err
			}
		}
	}
	var (
		tkt messages.Ticket
		key types.EncryptionKey
		cl  = a.cl // the goroutine in kdc may outlive mu when ctx ends first
	)
	err := a.kdc(ctx, func() error {
		var err error
		tkt, key, err = cl.GetServiceTicket(spn)
		return err
	})
	if err != nil {
		return tkt, key, full, a.explain("get a service ticket for "+full+" (Config.Kerberos.ServerPrincipal)", err)
	}
	if tkt.Realm != realm {
		return tkt, key, full, fmt.Errorf("Config.Kerberos.ServerPrincipal %s: the KDC gave a ticket of realm %s: map the host to realm %s in the [domain_realm] section of Config.Kerberos.Krb5Conf %s",
			full, tkt.Realm, realm, a.cfg.Krb5Conf)
	}
	return tkt, key, full, nil
}

// kdc runs a blocking gokrb5 call (its KDC exchanges have their own 5 s network timeouts but no
// context) and returns early when ctx ends.
func (a *kerberosAuth) kdc(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the KDC of realm %s (Config.Kerberos.Krb5Conf %s): %w", a.realm, a.cfg.Krb5Conf, ctx.Err())
	}
}

// close stops the TGT renewal goroutine of the login.
func (a *kerberosAuth) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cl != nil {
		a.cl.Destroy()
	}
}

// explain turns a gokrb5 error into one that names the setting to fix. gokrb5 reports KDC errors as
// text (its error type does not unwrap), so the codes are recognised by their names.
func (a *kerberosAuth) explain(what string, err error) error {
	msg := err.Error()
	var hint string
	switch {
	case strings.Contains(msg, "KDC_ERR_C_PRINCIPAL_UNKNOWN"):
		hint = fmt.Sprintf("the KDC does not know the client principal %s (Config.Kerberos.Principal)", a.principalString())
	case strings.Contains(msg, "KDC_ERR_S_PRINCIPAL_UNKNOWN"):
		hint = "the KDC does not know the server principal (Config.Kerberos.ServerPrincipal; _HOST is the host name the server registered under)"
	case strings.Contains(msg, "KDC_ERR_PREAUTH_FAILED"), strings.Contains(msg, "KRB_AP_ERR_BAD_INTEGRITY"),
		strings.Contains(msg, "integrity verification failed"), strings.Contains(msg, "checksum"):
		if a.cfg.Keytab != "" {
			hint = fmt.Sprintf("the keys in Config.Kerberos.Keytab %s are not the current keys of %s (a stale or wrong keytab: export it again)", a.cfg.Keytab, a.principalString())
		} else {
			hint = fmt.Sprintf("the KDC refused the credentials of %s from Config.Kerberos.TicketCache %s", a.principalString(), a.cache)
		}
	case strings.Contains(msg, "KRB_AP_ERR_SKEW"), strings.Contains(strings.ToLower(msg), "clock skew"):
		hint = "the clocks of this host and the KDC differ by more than the allowed skew (5 minutes by default): synchronise them"
	case strings.Contains(msg, "KDC_ERR_ETYPE_NOSUPP"), strings.Contains(msg, "KDC_ERR_ETYPE_NOTSUPP"):
		hint = "the KDC and the client share no encryption type (see the *_enctypes settings in Config.Kerberos.Krb5Conf " + a.cfg.Krb5Conf + ")"
	case strings.Contains(msg, "Matching key not found in keytab"):
		hint = fmt.Sprintf("Config.Kerberos.Keytab %s holds no key of the encryption type the KDC uses for %s", a.cfg.Keytab, a.principalString())
	case strings.Contains(msg, "networking"), strings.Contains(msg, "connection refused"), strings.Contains(msg, "no KDC"),
		strings.Contains(msg, "i/o timeout"), strings.Contains(msg, "waiting for the KDC"):
		hint = fmt.Sprintf("the KDC of realm %s cannot be reached (its address comes from Config.Kerberos.Krb5Conf %s)", a.realm, a.cfg.Krb5Conf)
	case strings.Contains(msg, "KDC_ERR_KEY_EXPIRED"), strings.Contains(msg, "KDC_ERR_CLIENT_REVOKED"):
		hint = fmt.Sprintf("the KDC refuses %s (Config.Kerberos.Principal): its key expired or it is locked", a.principalString())
	case strings.Contains(msg, "TKT_EXPIRED"):
		hint = "a ticket expired and could not be renewed (run kinit again, or use Config.Kerberos.Keytab)"
	}
	if hint != "" {
		return fmt.Errorf("kerberos: %s: %s: %w", what, hint, err)
	}
	return fmt.Errorf("kerberos: %s as %s: %w", what, a.principalString(), err)
}

// splitPrincipal splits "name@REALM" into name and realm, with def as the realm when none is given.
func splitPrincipal(p, def string) (name, realm string) {
	name, realm, ok := strings.Cut(p, "@")
	if !ok || realm == "" {
		realm = def
	}
	return name, realm
}

// keytabHolds reports whether kt has any key for principal@realm.
func keytabHolds(kt *keytab.Keytab, principal types.PrincipalName, realm string) bool {
	for _, e := range kt.Entries {
		if e.Principal.Realm == realm && types.NewPrincipalName(nametype.KRB_NT_PRINCIPAL, strings.Join(e.Principal.Components, "/")).Equal(principal) {
			return true
		}
	}
	return false
}

// keytabPrincipals lists the principals of a keytab, for errors.
func keytabPrincipals(kt *keytab.Keytab) string {
	seen := map[string]bool{}
	var out []string
	for _, e := range kt.Entries {
		p := strings.Join(e.Principal.Components, "/") + "@" + e.Principal.Realm
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return "nothing"
	}
	return strings.Join(out, ", ")
}

// explainServer adds to an error of the SASL handshake with the server spn what to check.
func (a *kerberosAuth) explainServer(spn string, err error) error {
	var se *saslError
	msg := err.Error()
	var hint string
	switch {
	case errors.Is(err, errSwitchToSimple):
		return err
	case strings.Contains(msg, "Clock skew"), strings.Contains(msg, "KRB_AP_ERR_SKEW"):
		hint = "the clocks of this host and the server differ by more than the allowed skew: synchronise them"
	case strings.Contains(msg, "Checksum failed"), strings.Contains(msg, "key is not available"),
		strings.Contains(msg, "Cannot find key"), strings.Contains(msg, "KRB_AP_ERR_BAD_INTEGRITY"),
		strings.Contains(msg, "KRB_AP_ERR_MODIFIED"):
		hint = "the server cannot read the ticket for " + spn + ": its keytab does not hold the KDC's current key of that principal, or the server runs as another principal (check Config.Kerberos.ServerPrincipal against the server's hbase.regionserver.kerberos.principal)"
	case errors.As(err, &se):
		hint = "the server refused the authentication of " + a.principalString() + " as " + spn
	}
	if hint != "" {
		return fmt.Errorf("kerberos: SASL GSSAPI with %s: %s: %w", spn, hint, err)
	}
	return fmt.Errorf("kerberos: SASL GSSAPI with %s: %w", spn, err)
}
