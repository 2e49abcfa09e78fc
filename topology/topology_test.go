package topology_test

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
	"github.com/abacus-stream/abacus/windows"
)

type click struct {
	User    string  `json:"user"`
	Page    string  `json:"page"`
	TS      int64   `json:"ts"`
	Latency float64 `json:"latency_ms"`
	Bytes   int     `json:"bytes"`
}

func clickSource(b *topology.Builder) *topology.Source[click] {
	return topology.NewSource(b, "clicks", topology.JSON[click](),
		func(c click) string { return c.User },
		func(c click) time.Time { return time.UnixMilli(c.TS) })
}

// TestBuildErrorsNameTheField checks that each misconfiguration fails Build with an error that
// names what is wrong.
func TestBuildErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		name    string
		declare func(b *topology.Builder)
		want    []string
	}{
		{"no grace", func(b *topology.Builder) {
			clickSource(b).Aggregate("hourly", windows.Tumbling(time.Hour)).Count("n")
		}, []string{`"hourly"`, "Grace is not stated"}},
		{"hop larger than size", func(b *topology.Builder) {
			clickSource(b).Aggregate("hop", windows.Hopping(time.Minute, time.Hour)).Grace(0).Count("n")
		}, []string{`"hop"`, "advance", "larger than size"}},
		{"unknown field", func(b *topology.Builder) {
			clickSource(b).Aggregate("s", windows.Tumbling(time.Hour)).Grace(0).Sum("total", "latncy")
		}, []string{`"total"`, `unknown field "latncy"`}},
		{"non-numeric field", func(b *topology.Builder) {
			clickSource(b).Aggregate("s", windows.Tumbling(time.Hour)).Grace(0).Max("m", "page")
		}, []string{`"m"`, `field "page"`, "not a number"}},
		{"duplicate aggregation", func(b *topology.Builder) {
			clickSource(b).Aggregate("s", windows.Tumbling(time.Hour)).Grace(0).Count("n").Sum("n", "bytes")
		}, []string{`aggregation "n" declared twice`}},
		{"duplicate set", func(b *topology.Builder) {
			s := clickSource(b)
			s.Aggregate("s", windows.Tumbling(time.Hour)).Grace(0).Count("n")
			s.Aggregate("s", windows.Tumbling(time.Minute)).Grace(0).Count("n")
		}, []string{`aggregate set "s"`, "declared twice"}},
		{"no aggregation", func(b *topology.Builder) {
			clickSource(b).Aggregate("s", windows.Tumbling(time.Hour)).Grace(0)
		}, []string{`"s"`, "no aggregation"}},
		{"bad quantile", func(b *topology.Builder) {
			clickSource(b).Aggregate("s", windows.Tumbling(time.Hour)).Grace(0).Quantiles("lat", "latency_ms", 0.5, 1.5)
		}, []string{`"lat"`, "1.5"}},
		{"distinct on float", func(b *topology.Builder) {
			clickSource(b).Aggregate("s", windows.Tumbling(time.Hour)).Grace(0).Distinct("d", "latency_ms")
		}, []string{`"d"`, `field "latency_ms"`}},
		{"incomplete custom", func(b *topology.Builder) {
			clickSource(b).Aggregate("s", windows.Tumbling(time.Hour)).Grace(0).
				Custom("c", topology.UserDefined[click, int]{Init: func() int { return 0 }})
		}, []string{`"c"`, "UserDefined.Add is nil"}},
		{"no source", func(b *topology.Builder) {}, []string{"no source"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := topology.New("t")
			c.declare(b)
			_, err := b.Build()
			if !errors.Is(err, topology.ErrInvalid) {
				t.Fatalf("Build error %v, want ErrInvalid", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestTopicNames: one compiled topology renamed for an environment, by prefix and by name; names
// that are not the topology's, or that collide, are refused; the original is untouched.
func TestTopicNames(t *testing.T) {
	b := topology.New("web")
	clickSource(b).Aggregate("h", windows.Tumbling(time.Hour)).Grace(0).Count("n")
	topo, err := b.LateTopic("web-late").Build()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := topo.WithTopicNames("dev-", map[string]string{"clicks": "raw.clicks"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(dev.Topics(), ","); got != "raw.clicks,dev-web-totals,dev-web-dead-letter,dev-web-late" {
		t.Fatalf("renamed topics %s", got)
	}
	if got := strings.Join(topo.Topics(), ","); got != "clicks,web-totals,web-dead-letter,web-late" {
		t.Fatalf("the original changed: %s", got)
	}
	if plan.Of(dev).Sources[0].Topic != "raw.clicks" || plan.Of(topo).Sources[0].Topic != "clicks" {
		t.Fatal("the engine sees other names")
	}
	if _, err := topo.WithTopicNames("", map[string]string{"nope": "x"}); err == nil || !strings.Contains(err.Error(), `"nope" is not a topic of topology web`) {
		t.Fatalf("unknown topic renamed: %v", err)
	}
	if _, err := topo.WithTopicNames("", map[string]string{"clicks": "web-totals"}); err == nil || !strings.Contains(err.Error(), "would both be named") {
		t.Fatalf("collision accepted: %v", err)
	}
}

// TestEmitModesMatchThePlan: the public emission modes and the engine's have the same values.
func TestEmitModesMatchThePlan(t *testing.T) {
	if plan.EmitFinal != plan.EmitMode(topology.EmitFinal) || plan.EmitEveryUpdate != plan.EmitMode(topology.EmitEveryUpdate) ||
		plan.EmitEarly != plan.EmitMode(topology.EmitEarly) {
		t.Fatal("emission modes differ")
	}
}

func TestBuildValid(t *testing.T) {
	b := topology.New("web")
	src := clickSource(b).EventType(func(c click) string { return c.Page })
	src.Aggregate("user-hourly", windows.Tumbling(time.Hour)).Grace(5*time.Minute).Count("n").Max("max_lat", "latency_ms")
	src.Aggregate("user-daily", windows.Tumbling(24*time.Hour)).Grace(time.Hour).Types("checkout").Sum("bytes", "Bytes")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Sets()) != 2 || topo.TotalsTopic() != "web-totals" || topo.DeadLetterTopic() != "web-dead-letter" {
		t.Fatalf("unexpected topology %+v", topo)
	}
	p := plan.Of(topo)
	if p.Sets[1].Accepts("home") || !p.Sets[1].Accepts("checkout") || !p.Sets[0].Accepts("home") {
		t.Error("type filter not applied")
	}
	if got := topo.Sources()[0].Sets; len(got) != 2 || got[0] != "user-hourly" || got[1] != "user-daily" {
		t.Errorf("source feeds sets %v, want both", got)
	}
	daily, ok := topo.Set("user-daily")
	if !ok || daily.Source != "clicks" || daily.Grace != time.Hour || len(daily.Types) != 1 || daily.Types[0] != "checkout" ||
		len(daily.Aggregations) != 1 || daily.Aggregations[0] != "bytes" || daily.Emit.Mode() != topology.EmitFinal {
		t.Errorf("set described as %+v", daily)
	}
	ps := p.Sources[0]
	ev, err := ps.Decode([]byte(`{"user":"u1","page":"checkout","ts":1000,"latency_ms":3.5}`))
	if err != nil {
		t.Fatal(err)
	}
	if ps.Entity(ev) != "u1" || ps.EventTime(ev) != 1000 || ps.Type(ev) != "checkout" {
		t.Errorf("extractors read %v", ev)
	}
	if _, err := ps.Decode([]byte(`{"user":`)); err == nil {
		t.Error("truncated JSON decoded")
	}
}

// aggCase declares one aggregation, the events it sees in two halves, and the value it must end with.
type aggCase struct {
	name    string
	declare func(*topology.AggregateSet[click]) *topology.AggregateSet[click]
	check   func(t *testing.T, v totals.Value)
}

// TestAggregationsRoundTrip adds events to two accumulators, encodes and decodes each, merges
// them, encodes and decodes again, and compares with one accumulator that saw every event.
func TestAggregationsRoundTrip(t *testing.T) {
	events := []click{}
	for i := range 1000 {
		events = append(events, click{User: "u", Page: "p" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)),
			TS: int64(i * 7 % 1000), Latency: float64(i%100 + 1), Bytes: i})
	}
	near := func(t *testing.T, got, want, rel float64) {
		t.Helper()
		if math.Abs(got-want) > rel*math.Abs(want) {
			t.Errorf("got %v, want %v (±%v%%)", got, want, rel*100)
		}
	}
	cases := []aggCase{
		{"count", func(a *topology.AggregateSet[click]) *topology.AggregateSet[click] { return a.Count("x") },
			func(t *testing.T, v totals.Value) { near(t, float64(v.Int), 1000, 0) }},
		{"sum", func(a *topology.AggregateSet[click]) *topology.AggregateSet[click] { return a.Sum("x", "bytes") },
			func(t *testing.T, v totals.Value) { near(t, v.Float, 999*1000/2, 0) }},
		{"min", func(a *topology.AggregateSet[click]) *topology.AggregateSet[click] { return a.Min("x", "latency_ms") },
			func(t *testing.T, v totals.Value) { near(t, v.Float, 1, 0) }},
		{"max", func(a *topology.AggregateSet[click]) *topology.AggregateSet[click] { return a.Max("x", "latency_ms") },
			func(t *testing.T, v totals.Value) { near(t, v.Float, 100, 0) }},
		{"mean", func(a *topology.AggregateSet[click]) *topology.AggregateSet[click] { return a.Mean("x", "latency_ms") },
			func(t *testing.T, v totals.Value) { near(t, v.Float, 50.5, 1e-12) }},
		// TS = i*7 % 1000: the largest, 999, belongs to i = 857 (857*7 = 5999).
		{"last", func(a *topology.AggregateSet[click]) *topology.AggregateSet[click] { return a.Last("x", "Bytes") },
			func(t *testing.T, v totals.Value) { near(t, v.Float, 857, 0) }},
		{"distinct", func(a *topology.AggregateSet[click]) *topology.AggregateSet[click] { return a.Distinct("x", "page") },
			func(t *testing.T, v totals.Value) { near(t, float64(v.Int), 676, 0.03) }},
		{"quantiles", func(a *topology.AggregateSet[click]) *topology.AggregateSet[click] {
			return a.Quantiles("x", "latency_ms", 0.5, 0.99)
		}, func(t *testing.T, v totals.Value) {
			if len(v.Quantiles) != 2 {
				t.Fatalf("quantiles %v", v.Quantiles)
			}
			near(t, v.Quantiles[0].Value, 50, 0.03)
			near(t, v.Quantiles[1].Value, 99, 0.03)
		}},
		{"custom", func(a *topology.AggregateSet[click]) *topology.AggregateSet[click] {
			return a.Custom("x", topology.UserDefined[click, uint64]{
				Init:   func() uint64 { return 0 },
				Add:    func(acc uint64, c click, _ int64) uint64 { return acc | 1<<(c.Bytes%64) },
				Merge:  func(a, b uint64) uint64 { return a | b },
				Encode: func(a uint64) []byte { return binary.BigEndian.AppendUint64(nil, a) },
				Decode: func(b []byte) (uint64, error) {
					if len(b) != 8 {
						return 0, errors.New("want 8 bytes")
					}
					return binary.BigEndian.Uint64(b), nil
				},
			})
		}, func(t *testing.T, v totals.Value) {
			if v.Kind != totals.KindBytes || binary.BigEndian.Uint64(v.Bytes) != math.MaxUint64 {
				t.Errorf("custom value %+v", v)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := topology.New("t")
			c.declare(clickSource(b).Aggregate("s", windows.Tumbling(time.Hour)).Grace(0))
			topo, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			def := plan.Of(topo).Sets[0].Aggs[0]
			roundTrip := func(a plan.Accumulator) plan.Accumulator {
				t.Helper()
				out, err := def.Decode(a.AppendBinary(nil))
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				return out
			}
			one, left, right := def.New(), def.New(), def.New()
			for i, e := range events {
				one.Add(e, e.TS)
				if i%3 == 0 {
					left.Add(e, e.TS)
				} else {
					right.Add(e, e.TS)
				}
				if i == 500 {
					left, right = roundTrip(left), roundTrip(right)
				}
			}
			merged := roundTrip(left)
			if err := merged.Merge(roundTrip(right)); err != nil {
				t.Fatal(err)
			}
			merged = roundTrip(merged)
			c.check(t, roundTrip(one).Value())
			c.check(t, merged.Value())
			if _, err := def.Decode(nil); err == nil && c.name != "custom" && c.name != "quantiles" {
				t.Error("decoding an empty accumulator succeeded")
			}
		})
	}
}

// TestZeroEmissionIsFinalOnly: the zero Emission is the documented default, FinalOnly.
func TestZeroEmissionIsFinalOnly(t *testing.T) {
	b := topology.New("zero-emission")
	topology.NewSource(b, "in", topology.JSON[struct{ TS int64 }](), func(struct{ TS int64 }) string { return "e" },
		func(e struct{ TS int64 }) time.Time { return time.UnixMilli(e.TS) }).
		Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Emit(topology.Emission{}).Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatalf("a zero Emission was refused: %v", err)
	}
	if got := topo.Sets()[0].Emit.Mode(); got != topology.EmitFinal {
		t.Fatalf("zero Emission built as mode %v, want EmitFinal", got)
	}
}

// TestZeroTopologyDescribesNothing: a Topology not made by Build (nil or zero) describes an empty
// topology instead of panicking; processors.New and live.New refuse it with an error.
func TestZeroTopologyDescribesNothing(t *testing.T) {
	for name, topo := range map[string]*topology.Topology{"nil": nil, "zero": {}} {
		if topo.Name() != "" || len(topo.Sets()) != 0 || len(topo.Sources()) != 0 || topo.LateTopic() != "" {
			t.Errorf("%s topology describes %q %v %v", name, topo.Name(), topo.Sets(), topo.Sources())
		}
		if _, ok := topo.Set("m"); ok {
			t.Errorf("%s topology has a set", name)
		}
		if got := topo.Topics(); len(got) != 0 {
			t.Errorf("%s topology's topics: %q, want none", name, got)
		}
	}
}

func TestRollupBuildErrors(t *testing.T) {
	type ev struct {
		D string
		T int64
		V float64
	}
	noMerge := topology.UserDefined[ev, int]{Init: func() int { return 0 }, Add: func(a int, _ ev, _ int64) int { return a + 1 },
		Encode: func(a int) []byte { return []byte{byte(a)} }, Decode: func(b []byte) (int, error) { return int(b[0]), nil }}
	key := func(e ev) string { return e.D }
	for _, c := range []struct {
		name string
		set  func(*topology.Source[ev])
		want string
	}{
		{"no dimension", func(s *topology.Source[ev]) {
			s.Aggregate("r", windows.Tumbling(time.Minute)).Grace(0).By("", key).Count("n")
		}, `aggregate set "r": By: the dimension has no name`},
		{"nil key", func(s *topology.Source[ev]) {
			s.Aggregate("r", windows.Tumbling(time.Minute)).Grace(0).By("region", nil).Count("n")
		}, `By("region"): the key func is nil`},
		{"entity", func(s *topology.Source[ev]) {
			s.Aggregate("r", windows.Tumbling(time.Minute)).Grace(0).By("entity", key).Count("n")
		}, `"entity" names the source's entity`},
		{"tag key", func(s *topology.Source[ev]) {
			s.Aggregate("r", windows.Tumbling(time.Minute)).Grace(0).By("quantile", key).Count("n")
		}, `uses the tag key "quantile"`},
		{"bad name", func(s *topology.Source[ev]) {
			s.Aggregate("r", windows.Tumbling(time.Minute)).Grace(0).By("a b", key).Count("n")
		}, `a dimension name is letters`},
		{"twice", func(s *topology.Source[ev]) {
			s.Aggregate("r", windows.Tumbling(time.Minute)).Grace(0).By("x", key).Global().Count("n")
		}, `By or Global called 2 times`},
		{"session", func(s *topology.Source[ev]) {
			s.Aggregate("r", windows.Session(time.Minute)).Grace(0).Global().Count("n")
		}, `a rollup set cannot have session windows`},
		{"every update", func(s *topology.Source[ev]) {
			s.Aggregate("r", windows.Tumbling(time.Minute)).Grace(0).Global().Emit(topology.EveryUpdate()).Count("n")
		}, `cannot emit EveryUpdate`},
		{"no merge", func(s *topology.Source[ev]) {
			s.Aggregate("r", windows.Tumbling(time.Minute)).Grace(0).Global().Custom("c", noMerge)
		}, `aggregation "c" cannot merge (UserDefined.Merge is nil), and a rollup set merges`},
		{"no merge session", func(s *topology.Source[ev]) {
			s.Aggregate("r", windows.Session(time.Minute)).Grace(0).Custom("c", noMerge)
		}, `and a set of session windows merges`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := topology.New("t")
			c.set(topology.NewSource(b, "in", topology.JSON[ev](), key, func(e ev) time.Time { return time.UnixMilli(e.T) }))
			_, err := b.Build()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Build: %v, want an error with %q", err, c.want)
			}
		})
	}
	// Without Merge, a custom aggregation is fine in an entity set of fixed windows.
	b := topology.New("t")
	s := topology.NewSource(b, "in", topology.JSON[ev](), key, func(e ev) time.Time { return time.UnixMilli(e.T) })
	s.Aggregate("e", windows.Tumbling(time.Minute)).Grace(0).Custom("c", noMerge)
	s.Aggregate("r", windows.Tumbling(time.Minute)).Grace(0).By("region", key).Where(func(e ev) bool { return e.V > 0 }).Count("n")
	s.Aggregate("g", windows.Tumbling(time.Minute)).Grace(0).Global().Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	r, _ := topo.Set("r")
	g, _ := topo.Set("g")
	e, _ := topo.Set("e")
	if !r.Rollup || r.Dimension != "region" || !g.Rollup || g.Dimension != "" || e.Rollup || e.Dimension != topology.EntityDimension {
		t.Fatalf("set infos: %+v %+v %+v", r, g, e)
	}
}

// TestSetNameMustBeUTF8: a set's name that is not valid UTF-8 is refused at Build, naming it:
// names appear in JSON and metric names, and the key index keeps such a name for itself.
func TestSetNameMustBeUTF8(t *testing.T) {
	b := topology.New("t")
	src := topology.NewSource(b, "in", topology.Raw(), func(e []byte) string { return "k" }, func(e []byte) time.Time { return time.UnixMilli(0) })
	src.Aggregate("bad\xff", windows.Tumbling(time.Minute)).Grace(0).Count("n")
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Fatalf("Build with a set named %q: %v", "bad\xff", err)
	}
}
