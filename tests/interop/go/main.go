// Command goka-interop plays Go Goka's part in goka-py's interop tests: it emits records,
// runs a counting processor group, and dumps a view of a table, all with lovoo/goka.
//
// Keys and values cross the process boundary hex-encoded, one record per line:
//
//	<hex key> <hex value | "-" for nil>
//
// so that any bytes (the empty key, keys that are not UTF-8, nil values) survive.
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: goka-interop emit|count|sum|pages|view [flags]")
	}
	cmd, args := os.Args[1], os.Args[2:]
	flags := flag.NewFlagSet(cmd, flag.ExitOnError)
	brokers := flags.String("brokers", "", "bootstrap servers, comma-separated")
	topic := flags.String("topic", "", "emit: the topic; count: the input stream; view: the table")
	group := flags.String("group", "", "count, sum: the group")
	table := flags.String("table", "", "sum: the table joined or looked up (Int64 values)")
	edge := flags.String("edge", "join", "sum: join or lookup")
	valueCodec := flags.String("codec", "string", "emit/view: string, int64, bytes or json")
	_ = flags.Parse(args)
	configure()
	servers := strings.Split(*brokers, ",")
	switch cmd {
	case "emit":
		emit(servers, *topic, codecOf(*valueCodec))
	case "count":
		count(servers, *group, *topic)
	case "sum":
		sum(servers, *group, *topic, *table, *edge)
	case "pages":
		pages(servers, *group, *topic)
	case "view":
		view(servers, *topic, codecOf(*valueCodec))
	default:
		fail("unknown command " + cmd)
	}
}

// configure sets goka's sarama config for one local Apache Kafka 4 broker: its protocol
// (Kafka 4 refuses requests older than 2.1's), one replica for the topics goka makes, and
// streams read from their beginning (tests emit before the group starts).
func configure() {
	config := goka.DefaultConfig()
	config.Version = sarama.V3_6_0_0
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Producer.Flush.Frequency = 5 * time.Millisecond
	goka.ReplaceGlobalConfig(config)
}

func topicManager() goka.TopicManagerBuilder {
	tm := goka.NewTopicManagerConfig()
	tm.Table.Replication = 1
	tm.Stream.Replication = 1
	return goka.TopicManagerBuilderWithTopicManagerConfig(tm)
}

func codecOf(name string) goka.Codec {
	switch name {
	case "string":
		return new(codec.String)
	case "int64":
		return new(codec.Int64)
	case "bytes":
		return new(codec.Bytes)
	case "json":
		return jsonCodec{}
	}
	fail("unknown codec " + name)
	return nil
}

// emit reads records from stdin and emits each to topic, then waits for every delivery.
func emit(brokers []string, topic string, c goka.Codec) {
	emitter, err := goka.NewEmitter(brokers, goka.Stream(topic), c,
		goka.WithEmitterTopicManagerBuilder(topicManager()))
	check(err)
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<24)
	var promises []*goka.Promise
	for scanner.Scan() {
		key, value, isNil := parse(scanner.Text())
		var decoded interface{}
		if !isNil {
			decoded, err = c.Decode(value)
			check(err)
		}
		promise, err := emitter.Emit(string(key), decoded)
		check(err)
		promises = append(promises, promise)
	}
	check(scanner.Err())
	for _, p := range promises {
		done := make(chan error, 1)
		p.Then(func(err error) { done <- err })
		check(<-done)
	}
	check(emitter.Finish())
	fmt.Printf("emitted %d\n", len(promises))
}

// count runs group: per key, the number of records of input (Int64 in the table), until
// SIGTERM or SIGINT; it prints "ready" once its partitions are assigned and recovered.
func count(brokers []string, group, input string) {
	graph := goka.DefineGroup(goka.Group(group),
		goka.Input(goka.Stream(input), new(codec.String), func(ctx goka.Context, msg interface{}) {
			add(ctx, 1)
		}),
		goka.Persist(new(codec.Int64)),
	)
	run(brokers, graph)
}

// run runs a processor of graph until SIGTERM or SIGINT; it prints "ready" once its
// partitions are assigned and recovered.
func run(brokers []string, graph *goka.GroupGraph) {
	processor, err := goka.NewProcessor(brokers, graph,
		goka.WithTopicManagerBuilder(topicManager()),
		goka.WithStorageBuilder(storageBuilder()))
	check(err)
	ctx, cancel := signalContext()
	defer cancel()
	errs := make(chan error, 1)
	go func() { errs <- processor.Run(ctx) }()
	check(processor.WaitForReadyContext(ctx))
	fmt.Println("ready")
	check(<-errs)
}

// sum runs group: per key, the sum over input's records of the key's value in table (a join:
// the co-partitioned table; a lookup: the whole table; 0 where the table has none).
func sum(brokers []string, group, input, table, edge string) {
	tableEdge := goka.Join(goka.Table(table), new(codec.Int64))
	if edge == "lookup" {
		tableEdge = goka.Lookup(goka.Table(table), new(codec.Int64))
	}
	graph := goka.DefineGroup(goka.Group(group),
		goka.Input(goka.Stream(input), new(codec.String), func(ctx goka.Context, msg interface{}) {
			var found any
			if edge == "lookup" {
				found = ctx.Lookup(goka.Table(table), ctx.Key())
			} else {
				found = ctx.Join(goka.Table(table))
			}
			if found != nil {
				add(ctx, found.(int64))
			} else {
				add(ctx, 0)
			}
		}),
		tableEdge,
		goka.Persist(new(codec.Int64)),
	)
	run(brokers, graph)
}

// pages runs group: each record of input (key: a user, value: a page) is looped back under
// its page, and the loop counts per page (the table's keys are pages).
func pages(brokers []string, group, input string) {
	graph := goka.DefineGroup(goka.Group(group),
		goka.Input(goka.Stream(input), new(codec.String), func(ctx goka.Context, msg interface{}) {
			ctx.Loopback(msg.(string), ctx.Key())
		}),
		goka.Loop(new(codec.String), func(ctx goka.Context, msg interface{}) {
			add(ctx, 1)
		}),
		goka.Persist(new(codec.Int64)),
	)
	run(brokers, graph)
}

// view prints every key of table and its value once the view has recovered.
func view(brokers []string, table string, c goka.Codec) {
	v, err := goka.NewView(brokers, goka.Table(table), c,
		goka.WithViewTopicManagerBuilder(topicManager()),
		goka.WithViewStorageBuilder(storageBuilder()))
	check(err)
	ctx, cancel := signalContext()
	defer cancel()
	errs := make(chan error, 1)
	go func() { errs <- v.Run(ctx) }()
	for !v.Recovered() {
		select {
		case err := <-errs:
			check(err)
			fail("the view stopped before it recovered")
		case <-time.After(10 * time.Millisecond):
		}
	}
	it, err := v.Iterator()
	check(err)
	for it.Next() {
		value, err := it.Value()
		check(err)
		encoded, err := c.Encode(value)
		check(err)
		fmt.Printf("%s %s\n", hex.EncodeToString([]byte(it.Key())), hex.EncodeToString(encoded))
	}
	it.Release()
	cancel()
	check(<-errs)
}

func parse(line string) (key, value []byte, isNil bool) {
	parts := strings.SplitN(line, " ", 2)
	if len(parts) != 2 {
		fail("a record is '<hex key> <hex value or ->', got " + line)
	}
	key, err := hex.DecodeString(parts[0])
	check(err)
	if parts[1] == "-" {
		return key, nil, true
	}
	value, err = hex.DecodeString(parts[1])
	check(err)
	return key, value, false
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
}

func check(err error) {
	if err != nil && err != context.Canceled {
		fail(err.Error())
	}
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, "goka-interop:", message)
	os.Exit(1)
}

// jsonCodec is how a Go team writes a JSON codec for goka: encoding/json both ways.
type jsonCodec struct{}

func (jsonCodec) Encode(value any) ([]byte, error) { return json.Marshal(value) }

func (jsonCodec) Decode(data []byte) (any, error) {
	var value any
	err := json.Unmarshal(data, &value)
	return value, err
}

// add adds by to the key's Int64 value (none: 0).
func add(ctx goka.Context, by int64) {
	var n int64
	if v := ctx.Value(); v != nil {
		n = v.(int64)
	}
	ctx.SetValue(n + by)
}

// storageBuilder keeps tables in memory: a restarted group or view recovers from the table
// topic, as goka does on a new machine.
func storageBuilder() storage.Builder {
	return storage.MemoryBuilder()
}
