package app

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Invocation is a command line that abacus accepts, as ParseCommandLine read it: what deployment
// files are checked against, since a container's command line is otherwise only tried when the
// container starts.
type Invocation struct {
	// Command is the subcommand with its verb, e.g. "run", "serve", "admin create".
	Command string
	// Flags are the flags the command line sets, by name without the dash.
	Flags map[string]string
	// Roles are the roles the command runs: those of run's -roles, the query role for serve, every
	// role for demo; none for the other commands.
	Roles []string

	common common // the flags as the command keeps them, for ResolveConfig
}

// parseOnlyKey marks a context whose commands stop after reading their command line, filling the
// *Invocation it holds.
type parseOnlyKey struct{}

// ParseCommandLine reads args (the words after the program name) with the same flag parsing and
// usage checks as Run, and returns what they ask for, stopping before any config file is read or
// anything is reached. An error is what Run would print for a usage mistake. A request for help or
// for the version runs no command, so it is an error here too.
func (p Program) ParseCommandLine(args []string) (*Invocation, error) {
	inv := &Invocation{}
	ctx := context.WithValue(context.Background(), parseOnlyKey{}, inv)
	var stderr bytes.Buffer
	if code := p.Run(ctx, args, io.Discard, &stderr); code != 0 {
		return nil, fmt.Errorf("abacus %s: exit code %d: %s", strings.Join(args, " "), code, strings.TrimSpace(stderr.String()))
	}
	if inv.Command == "" {
		return nil, fmt.Errorf("abacus %s runs no command (help or version)", strings.Join(args, " "))
	}
	return inv, nil
}

// parsedOnly reports whether ctx asks the command to stop once its command line is read, and then
// records the command line. Every command calls it after its usage checks, before it loads or
// connects anything.
func parsedOnly(ctx context.Context, fs *flag.FlagSet, c *common, roles []string) bool {
	inv, ok := ctx.Value(parseOnlyKey{}).(*Invocation)
	if !ok {
		return false
	}
	inv.Command, inv.Flags, inv.Roles = fs.Name(), map[string]string{}, append([]string(nil), roles...)
	fs.Visit(func(f *flag.Flag) { inv.Flags[f.Name] = f.Value.String() })
	if c != nil {
		inv.common = *c
	}
	return true
}

// ResolveConfig is the configuration the invocation would run with if its -config file held file
// and its environment were lookup: the file (with ${NAME} expanded from lookup), then the ABACUS_*
// variables, then the flags, defaults filled and validated, exactly as the command itself loads it.
// A nil file stands for a command line without -config.
func (p Program) ResolveConfig(inv *Invocation, file []byte, lookup func(string) (string, bool)) (*Config, error) {
	if inv == nil {
		return nil, errors.New("no invocation")
	}
	cfg := &Config{}
	if file != nil {
		var err error
		if cfg, err = ParseConfig(file, lookup); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	getenv := func(name string) string {
		v, _ := lookup(name)
		return v
	}
	c := inv.common
	cfg, _, err := p.resolve(&c, cfg, getenv)
	return cfg, err
}

// EnvVars is every ABACUS_* environment variable the configuration reads (Config.ApplyEnv), sorted.
// It is found by watching ApplyEnv ask for them, so it cannot fall behind what ApplyEnv reads.
func EnvVars() []string {
	seen := map[string]bool{}
	(&Config{}).ApplyEnv(func(name string) string {
		seen[name] = true
		return ""
	})
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// OpsListenAddr is the address where a process running roles with this config serves /metrics,
// /healthz and /readyz: ops.listen, the query server's listener when the query role runs in the
// process and ops.listen is unset, else the default of its first role; "" for ops.listen: off.
func (c *Config) OpsListenAddr(roles []string) string {
	addr, separate := opsListen(c, roles)
	if !separate && c.Ops.Listen != "off" && servesOpsIn(roles) {
		return c.Query.Listen
	}
	return addr
}
