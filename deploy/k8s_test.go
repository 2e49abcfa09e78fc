package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/app"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// cluster is an overlay's objects, decoded into their API types.
type cluster struct {
	configMaps map[string]corev1.ConfigMap
	secrets    map[string]corev1.Secret
	services   []corev1.Service
	pdbs       []policyv1.PodDisruptionBudget
	workloads  []workload
}

// workload is a Deployment, StatefulSet or Job: its pods as the checks see them.
type workload struct {
	kind, name string
	selector   *metav1.LabelSelector
	pod        corev1.PodTemplateSpec
	sts        *appsv1.StatefulSet
	job        *batchv1.Job
}

func (w workload) String() string { return w.kind + " " + w.name }

// strict decodes one object, refusing fields its type does not have: a misspelt or misplaced field
// that the API server would drop (or refuse) fails here.
func strict[T any](t *testing.T, where string, b []byte) T {
	t.Helper()
	var v T
	if err := yaml.UnmarshalStrict(b, &v); err != nil {
		t.Fatalf("%s: %v\n%s", where, err, b)
	}
	return v
}

// build runs kustomize on an overlay and decodes every object.
func build(t *testing.T, overlay string) cluster {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", overlay, err)
	}
	c := cluster{configMaps: map[string]corev1.ConfigMap{}, secrets: map[string]corev1.Secret{}}
	for _, r := range rm.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(b, &tm); err != nil {
			t.Fatal(err)
		}
		where := fmt.Sprintf("%s: %s %s", overlay, tm.Kind, r.GetName())
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ConfigMap":
			o := strict[corev1.ConfigMap](t, where, b)
			c.configMaps[o.Name] = o
		case "v1 Secret":
			o := strict[corev1.Secret](t, where, b)
			c.secrets[o.Name] = o
		case "v1 Service":
			c.services = append(c.services, strict[corev1.Service](t, where, b))
		case "policy/v1 PodDisruptionBudget":
			c.pdbs = append(c.pdbs, strict[policyv1.PodDisruptionBudget](t, where, b))
		case "apps/v1 StatefulSet":
			o := strict[appsv1.StatefulSet](t, where, b)
			c.workloads = append(c.workloads, workload{kind: tm.Kind, name: o.Name, selector: o.Spec.Selector, pod: o.Spec.Template, sts: &o})
		case "apps/v1 Deployment":
			o := strict[appsv1.Deployment](t, where, b)
			c.workloads = append(c.workloads, workload{kind: tm.Kind, name: o.Name, selector: o.Spec.Selector, pod: o.Spec.Template})
		case "batch/v1 Job":
			o := strict[batchv1.Job](t, where, b)
			c.workloads = append(c.workloads, workload{kind: tm.Kind, name: o.Name, selector: o.Spec.Selector, pod: o.Spec.Template, job: &o})
		default:
			t.Fatalf("%s: an object of a kind the checks do not know (%s %s): teach them", where, tm.APIVersion, tm.Kind)
		}
	}
	return c
}

// secretValue is a Secret's key, from data or stringData.
func secretValue(s corev1.Secret, key string) (string, bool) {
	if v, ok := s.StringData[key]; ok {
		return v, true
	}
	v, ok := s.Data[key]
	return string(v), ok
}

// matches reports whether a selector selects the labels.
func matches(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(l))
}

// TestKubernetesOverlays builds every overlay under deploy/k8s/overlays and checks what it would
// apply against abacus: its command lines, environment, config file, listeners and stop timeouts.
func TestKubernetesOverlays(t *testing.T) {
	overlays, err := filepath.Glob(filepath.Join("k8s", "overlays", "*"))
	if err != nil || len(overlays) < 2 {
		t.Fatalf("overlays: %v %v: want dev and production at least", overlays, err)
	}
	readDockerfile(t) // the containers' args are abacus's: the image's entrypoint is /abacus
	for _, o := range overlays {
		t.Run(filepath.Base(o), func(t *testing.T) { checkCluster(t, build(t, o)) })
	}
	// The backfill: the production overlay with an Indexed Job beside it.
	t.Run("backfill", func(t *testing.T) {
		c := build(t, filepath.Join("k8s", "backfill"))
		checkCluster(t, c)
		checkBackfillJob(t, c)
	})
}

// checkBackfillJob: the backfill Job is Indexed, each pod runs its share (-share I/N with N the
// Job's completions and parallelism), and restarted pods are fine (backfill writes the same cells).
func checkBackfillJob(t *testing.T, c cluster) {
	i := slices.IndexFunc(c.workloads, func(w workload) bool { return w.job != nil && w.name == "abacus-backfill" })
	if i < 0 {
		t.Fatal("no Job abacus-backfill")
	}
	w := c.workloads[i]
	spec := w.job.Spec
	args := w.pod.Spec.Containers[0].Args
	share := ""
	if j := slices.Index(args, "-share"); j >= 0 && j+1 < len(args) {
		share = args[j+1]
	}
	n := int32(0)
	if spec.Completions != nil && spec.Parallelism != nil && *spec.Completions == *spec.Parallelism {
		n = *spec.Completions
	}
	if spec.CompletionMode == nil || *spec.CompletionMode != batchv1.IndexedCompletion || n == 0 ||
		share != fmt.Sprintf("$(JOB_COMPLETION_INDEX)/%d", n) {
		t.Errorf("%s: completion mode %v, completions %v, parallelism %v, -share %q: want Indexed, N pods at once and -share $(JOB_COMPLETION_INDEX)/N",
			w, spec.CompletionMode, spec.Completions, spec.Parallelism, share)
	}
	if inv, err := program.ParseCommandLine(expandArgs(args, map[string]string{"JOB_COMPLETION_INDEX": fmt.Sprint(n - 1)})); err != nil || inv.Command != "backfill" {
		t.Errorf("%s: the last pod's command line: %v, %v", w, inv, err)
	}
}

// expandArgs replaces $(NAME) in args by env's NAME, as the kubelet does with a container's
// environment; a name env lacks stays as written.
func expandArgs(args []string, env map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = envRef.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	return out
}

var envRef = regexp.MustCompile(`\$\([A-Za-z_][A-Za-z0-9_]*\)`)

func checkCluster(t *testing.T, c cluster) {
	running := map[string]workload{} // role -> its workload
	for _, w := range c.workloads {
		if !matches(t, w.selector, w.pod.Labels) && w.kind != "Job" {
			t.Errorf("%s: its selector does not select its own pods", w)
		}
		checkVolumes(t, c, w)
		if len(w.pod.Spec.Containers) != 1 {
			t.Errorf("%s: %d containers, want the abacus container alone", w, len(w.pod.Spec.Containers))
			continue
		}
		ctr := w.pod.Spec.Containers[0]
		where := fmt.Sprintf("%s container %s", w, ctr.Name)
		if len(ctr.Command) > 0 {
			t.Errorf("%s replaces the image's entrypoint (/abacus): give abacus's arguments as args", where)
			continue
		}
		env, instanceFromName := podEnv(t, c, w, ctr)
		if w.job != nil && w.job.Spec.CompletionMode != nil && *w.job.Spec.CompletionMode == batchv1.IndexedCompletion {
			env["JOB_COMPLETION_INDEX"] = "0" // what Kubernetes sets in each pod of an Indexed Job
		}
		inv, err := program.ParseCommandLine(expandArgs(ctr.Args, env))
		if err != nil {
			t.Errorf("%s: args: %v", where, err)
			continue
		}
		file := configFile(t, c, w, ctr, inv.Flags["config"])
		// The config's validation reads the credentials files, as the process does at start: they
		// are written where the Secret volumes would put them, under a folder of the test.
		rebase := secretFiles(t, c, w, ctr)
		for k, v := range env {
			env[k] = rebase(v)
		}
		cfg, err := program.ResolveConfig(inv, []byte(rebase(string(file))), func(n string) (string, bool) { v, ok := env[n]; return v, ok })
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		checkSecretFiles(t, c, w, ctr, cfg, rebase)
		if len(inv.Roles) == 0 {
			continue // a command that ends (admin create): no probes, no budget
		}
		if len(inv.Roles) != 1 {
			t.Errorf("%s runs roles %v: one role per workload, so that each scales and stops on its own", where, inv.Roles)
			continue
		}
		role := inv.Roles[0]
		if prev, ok := running[role]; ok {
			t.Errorf("%s and %s both run %s", prev, w, role)
		}
		running[role] = w
		grace := time.Duration(30) * time.Second
		if g := w.pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		// The kubelet SIGKILLs a pod whose stop outlasts its grace period, though it was going to finish.
		if stop, ok := app.StopBound(role); !ok {
			t.Errorf("%s runs %s, a role abacus does not know", where, role)
		} else if grace <= stop {
			t.Errorf("%s: terminationGracePeriodSeconds %s, not longer than a clean stop of the %s may take (%s)", where, grace, role, stop)
		}
		if role == app.RoleQuery {
			if w.kind != "Deployment" {
				t.Errorf("%s runs the query server, which keeps no state and joins no group: want a Deployment", w)
			}
			h, port := hostPort(t, cfg.Query.Listen)
			if loopback(h) || !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return int(p.ContainerPort) == port }) {
				t.Errorf("%s: query.listen %s is not a declared container port reachable from outside the pod", where, cfg.Query.Listen)
			}
		} else {
			checkMember(t, w, where, role, cfg, instanceFromName)
		}
		checkProbes(t, w, ctr, where, cfg.OpsListenAddr(inv.Roles))
		n := 0
		for _, pdb := range c.pdbs {
			if matches(t, pdb.Spec.Selector, w.pod.Labels) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d PodDisruptionBudgets select its pods, want one", w, n)
		}
	}
	for _, r := range app.RoleNames() {
		if _, ok := running[r]; !ok {
			t.Errorf("no workload runs the %s role", r)
		}
	}
	for _, pdb := range c.pdbs {
		if !slices.ContainsFunc(c.workloads, func(w workload) bool { return w.kind != "Job" && matches(t, pdb.Spec.Selector, w.pod.Labels) }) {
			t.Errorf("PodDisruptionBudget %s selects no pods", pdb.Name)
		}
	}
	checkServices(t, c)
}

// podEnv is a container's environment as the kubelet would set it (envFrom, then env over it),
// with the pod's name standing for metadata.name; it fails on a reference to a missing Secret,
// ConfigMap or key, and on an ABACUS_* variable the config does not read. instanceFromName says
// that ABACUS_INSTANCE_ID is the pod's name.
func podEnv(t *testing.T, c cluster, w workload, ctr corev1.Container) (map[string]string, bool) {
	t.Helper()
	where := fmt.Sprintf("%s container %s", w, ctr.Name)
	env := map[string]string{}
	var names []string
	for _, from := range ctr.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := c.configMaps[from.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: envFrom ConfigMap %s does not exist", where, from.ConfigMapRef.Name)
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = v
				names = append(names, from.Prefix+k)
			}
		case from.SecretRef != nil:
			s, ok := c.secrets[from.SecretRef.Name]
			if !ok {
				t.Errorf("%s: envFrom Secret %s does not exist", where, from.SecretRef.Name)
			}
			for k := range s.StringData {
				env[from.Prefix+k] = "secret"
				names = append(names, from.Prefix+k)
			}
		}
	}
	fromName := false
	for _, e := range ctr.Env {
		names = append(names, e.Name)
		switch vf := e.ValueFrom; {
		case vf == nil:
			env[e.Name] = e.Value
		case vf.FieldRef != nil:
			env[e.Name] = w.name + "-0"
			if e.Name == "ABACUS_INSTANCE_ID" {
				fromName = vf.FieldRef.FieldPath == "metadata.name"
			}
		case vf.SecretKeyRef != nil:
			s, ok := c.secrets[vf.SecretKeyRef.Name]
			v, has := secretValue(s, vf.SecretKeyRef.Key)
			if !ok || !has {
				t.Errorf("%s: %s refers to key %s of Secret %s, which does not exist", where, e.Name, vf.SecretKeyRef.Key, vf.SecretKeyRef.Name)
			}
			env[e.Name] = v
		case vf.ConfigMapKeyRef != nil:
			v, ok := c.configMaps[vf.ConfigMapKeyRef.Name].Data[vf.ConfigMapKeyRef.Key]
			if !ok {
				t.Errorf("%s: %s refers to key %s of ConfigMap %s, which does not exist", where, e.Name, vf.ConfigMapKeyRef.Key, vf.ConfigMapKeyRef.Name)
			}
			env[e.Name] = v
		}
	}
	checkEnvRead(t, where, names)
	return env, fromName
}

// mountOf finds the volume mount that provides path in the container, and path's name inside
// the volume.
func mountOf(w workload, ctr corev1.Container, path string) (corev1.VolumeMount, string, bool) {
	best, rel, found := corev1.VolumeMount{}, "", false
	for _, m := range ctr.VolumeMounts {
		switch {
		case m.MountPath == path && m.SubPath != "":
			return m, m.SubPath, true
		case m.SubPath == "" && under(path, m.MountPath) && len(m.MountPath) > len(best.MountPath):
			r, _ := filepath.Rel(m.MountPath, path)
			best, rel, found = m, r, true
		}
	}
	return best, rel, found
}

// volume is the pod volume called name.
func volume(w workload, name string) (corev1.Volume, bool) {
	for _, v := range w.pod.Spec.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return corev1.Volume{}, false
}

// configFile is the text of the file at path in the container, which a ConfigMap must provide.
func configFile(t *testing.T, c cluster, w workload, ctr corev1.Container, path string) []byte {
	t.Helper()
	if path == "" {
		return nil
	}
	m, rel, ok := mountOf(w, ctr, path)
	v, vok := volume(w, m.Name)
	if !ok || !vok || v.ConfigMap == nil {
		t.Errorf("%s: -config %s is not mounted from a ConfigMap", w, path)
		return nil
	}
	cm, ok := c.configMaps[v.ConfigMap.Name]
	data, has := cm.Data[rel]
	if !ok || !has {
		t.Errorf("%s: -config %s: ConfigMap %s has no key %s", w, path, v.ConfigMap.Name, rel)
		return nil
	}
	return []byte(data)
}

// checkSecretFiles checks that every credentials file the config names is mounted from a Secret
// that has it: in every role's pod, since every role validates the whole config at start.
func checkSecretFiles(t *testing.T, c cluster, w workload, ctr corev1.Container, cfg *app.Config, rebase func(string) string) {
	t.Helper()
	base := strings.TrimSuffix(rebase("/"), "/")
	for field, path := range map[string]string{
		"kafka.sasl.password_file": cfg.Kafka.SASL.PasswordFile, "kafka.tls.ca_file": cfg.Kafka.TLS.CAFile,
		"kafka.tls.cert_file": cfg.Kafka.TLS.CertFile, "kafka.tls.key_file": cfg.Kafka.TLS.KeyFile,
		"query.auth.tokens_file": cfg.Query.Auth.TokensFile, "query.auth.basic_file": cfg.Query.Auth.BasicFile,
		"query.tls.cert_file": cfg.Query.TLS.CertFile, "query.tls.key_file": cfg.Query.TLS.KeyFile,
	} {
		if path == "" {
			continue
		}
		path = "/" + strings.TrimPrefix(strings.TrimPrefix(path, base), "/")
		m, rel, ok := mountOf(w, ctr, path)
		v, vok := volume(w, m.Name)
		if !ok || !vok || v.Secret == nil {
			t.Errorf("%s: %s %s is not mounted from a Secret", w, field, path)
			continue
		}
		key := rel
		for _, it := range v.Secret.Items {
			if it.Path == rel {
				key = it.Key
			}
		}
		if len(v.Secret.Items) > 0 && !slices.ContainsFunc(v.Secret.Items, func(it corev1.KeyToPath) bool { return it.Path == rel }) {
			t.Errorf("%s: %s %s: the Secret volume %s does not project %s", w, field, path, m.Name, rel)
			continue
		}
		if _, has := secretValue(c.secrets[v.Secret.SecretName], key); !has {
			t.Errorf("%s: %s %s: Secret %s has no key %s", w, field, path, v.Secret.SecretName, key)
		}
	}
}

// secretFiles writes the files the container's Secret volumes would hold under a folder of the
// test, and returns what moves a path of the container (in a config or a variable) there.
func secretFiles(t *testing.T, c cluster, w workload, ctr corev1.Container) func(string) string {
	t.Helper()
	dir := t.TempDir()
	var mounts []string
	for _, m := range ctr.VolumeMounts {
		v, ok := volume(w, m.Name)
		if !ok || v.Secret == nil {
			continue
		}
		s := c.secrets[v.Secret.SecretName]
		files := map[string]string{}
		for k := range s.StringData {
			files[k] = k
		}
		for k := range s.Data {
			files[k] = k
		}
		if len(v.Secret.Items) > 0 {
			files = map[string]string{}
			for _, it := range v.Secret.Items {
				files[it.Path] = it.Key
			}
		}
		for path, key := range files {
			val, _ := secretValue(s, key)
			target := filepath.Join(dir, m.MountPath, path)
			if m.SubPath != "" {
				if m.SubPath != path {
					continue
				}
				target = filepath.Join(dir, m.MountPath)
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, []byte(val), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		mounts = append(mounts, m.MountPath)
	}
	return func(s string) string {
		if s == "/" {
			return dir + "/"
		}
		for _, m := range mounts {
			s = strings.ReplaceAll(s, m+"/", dir+m+"/")
		}
		return s
	}
}

// checkVolumes checks that every mount has a volume and every volume's ConfigMap or Secret exists.
func checkVolumes(t *testing.T, c cluster, w workload) {
	t.Helper()
	for _, v := range w.pod.Spec.Volumes {
		if v.ConfigMap != nil {
			if _, ok := c.configMaps[v.ConfigMap.Name]; !ok {
				t.Errorf("%s: volume %s: ConfigMap %s does not exist", w, v.Name, v.ConfigMap.Name)
			}
		}
		if v.Secret != nil {
			s, ok := c.secrets[v.Secret.SecretName]
			if !ok {
				t.Errorf("%s: volume %s: Secret %s does not exist", w, v.Name, v.Secret.SecretName)
			}
			for _, it := range v.Secret.Items {
				if _, has := secretValue(s, it.Key); !has {
					t.Errorf("%s: volume %s: Secret %s has no key %s", w, v.Name, v.Secret.SecretName, it.Key)
				}
			}
		}
	}
	for _, ctr := range w.pod.Spec.Containers {
		for _, m := range ctr.VolumeMounts {
			_, ok := volume(w, m.Name)
			if !ok && (w.sts == nil || !slices.ContainsFunc(w.sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == m.Name })) {
				t.Errorf("%s: mount %s has no volume or volume claim template", w, m.Name)
			}
		}
	}
}

// checkMember checks a role that joins a consumer group: a StatefulSet, whose pods' stable names
// are their instance ids, and for the processor its state on a volume claim of each pod.
func checkMember(t *testing.T, w workload, where, role string, cfg *app.Config, instanceFromName bool) {
	t.Helper()
	if w.kind != "StatefulSet" {
		t.Errorf("%s runs %s, a static group member: want a StatefulSet (stable pod names as instance ids)", w, role)
		return
	}
	if !instanceFromName || !cfg.Membership.Static() {
		t.Errorf("%s: ABACUS_INSTANCE_ID must be the pod's name (fieldRef metadata.name) with static membership", where)
	}
	if role != app.RoleProcessor {
		return
	}
	m, _, ok := mountOf(w, w.pod.Spec.Containers[0], cfg.Processor.StoragePath)
	if !ok || !slices.ContainsFunc(w.sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == m.Name }) {
		t.Errorf("%s: processor.storage_path %s is not on a volume claim template's volume: a restarted pod would restore all its state from the changelog", where, cfg.Processor.StoragePath)
	}
}

// checkProbes checks that liveness asks /healthz and readiness /readyz, on the port the config
// serves them on, declared by the container.
func checkProbes(t *testing.T, w workload, ctr corev1.Container, where, ops string) {
	t.Helper()
	if ops == "" {
		t.Errorf("%s: ops.listen is off: nothing answers the probes", where)
		return
	}
	h, port := hostPort(t, ops)
	if loopback(h) {
		t.Errorf("%s: ops endpoints on %s: the kubelet's probes cannot reach a loopback address", where, ops)
	}
	for _, p := range []struct {
		kind, path string
		probe      *corev1.Probe
	}{{"liveness", "/healthz", ctr.LivenessProbe}, {"readiness", "/readyz", ctr.ReadinessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", where, p.kind)
			continue
		}
		g := p.probe.HTTPGet
		got, ok := containerPort(ctr, g.Port.String())
		if g.Path != p.path || !ok || got != port {
			t.Errorf("%s: %s probe asks %s on port %s (%d), want %s on the ops port %d", where, p.kind, g.Path, g.Port.String(), got, p.path, port)
		}
	}
}

// containerPort resolves a port given by name or number to a port the container declares.
func containerPort(ctr corev1.Container, port string) (int, bool) {
	for _, p := range ctr.Ports {
		if p.Name == port || fmt.Sprint(p.ContainerPort) == port {
			return int(p.ContainerPort), true
		}
	}
	return 0, false
}

// checkServices checks that every Service selects pods, that each of its target ports is a port
// those pods declare, and that each StatefulSet's serviceName is a Service that selects it.
func checkServices(t *testing.T, c cluster) {
	t.Helper()
	for _, s := range c.services {
		sel := &metav1.LabelSelector{MatchLabels: s.Spec.Selector}
		n := 0
		for _, w := range c.workloads {
			if w.kind == "Job" || !matches(t, sel, w.pod.Labels) {
				continue
			}
			n++
			for _, p := range s.Spec.Ports {
				target := p.TargetPort.String()
				if target == "0" || target == "" {
					target = fmt.Sprint(p.Port)
				}
				if !slices.ContainsFunc(w.pod.Spec.Containers, func(ctr corev1.Container) bool { _, ok := containerPort(ctr, target); return ok }) {
					t.Errorf("Service %s port %s targets %s, which %s's pods do not declare", s.Name, p.Name, target, w)
				}
			}
		}
		if n == 0 {
			t.Errorf("Service %s selects no pods", s.Name)
		}
	}
	for _, w := range c.workloads {
		if w.sts == nil {
			continue
		}
		if !slices.ContainsFunc(c.services, func(s corev1.Service) bool {
			return s.Name == w.sts.Spec.ServiceName && matches(t, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, w.pod.Labels)
		}) {
			t.Errorf("%s: serviceName %q is no Service that selects its pods", w, w.sts.Spec.ServiceName)
		}
	}
}
