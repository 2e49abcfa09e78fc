// Package layers holds the tests of the project's layering: imports run one way, from the leaves
// (topology, windows, state, totals, schema, accum, ...) up to app and cmd; the leaves that
// describe or encode data link no Kafka client; the query side links neither franz-go, goka nor
// sarama; and no product package's tests import bench/ or cmd/.
package layers
