package callbacks

import (
	"maps"
	"slices"
	"strings"
)

// keyPos says which arguments of a command are keys. The host must know
// this to hold plugins to the ff: prefix and to route commands in a cluster,
// so a command that is not in the table is refused even when a scanner
// declares it.
type keyPos uint8

const (
	keysNone  keyPos = iota // no key (TIME, PING)
	keysFirst               // the first argument is the only key
	keysAll                 // every argument is a key (DEL, EXISTS, UNLINK, MGET)
)

type cmdSpec struct {
	keys  keyPos
	write bool // refused in dry runs
	// read says how big the reply can be before it is read (reads.go).
	read readKind
}

// commandTable lists the commands plugins may declare. It is deliberately
// small: single-key data commands, the multi-key commands whose arguments
// are all keys, and two keyless ones. Commands with keys in other places
// (MSET, SORT, ZUNIONSTORE, RENAME, COPY, EVAL...) and administrative
// commands are absent, so they are refused.
var commandTable = map[string]cmdSpec{
	// keyless
	"TIME": {keysNone, false, readBounded},
	"PING": {keysNone, false, readBounded},
	// multi-key, all arguments are keys
	"DEL":    {keysAll, true, readBounded},
	"UNLINK": {keysAll, true, readBounded},
	"EXISTS": {keysAll, false, readBounded},
	"MGET":   {keysAll, false, readValues},
	// strings and generic
	"GET":     {keysFirst, false, readValues},
	"STRLEN":  {keysFirst, false, readBounded},
	"TYPE":    {keysFirst, false, readBounded},
	"TTL":     {keysFirst, false, readBounded},
	"PTTL":    {keysFirst, false, readBounded},
	"SET":     {keysFirst, true, readBounded},
	"INCR":    {keysFirst, true, readBounded},
	"INCRBY":  {keysFirst, true, readBounded},
	"DECR":    {keysFirst, true, readBounded},
	"DECRBY":  {keysFirst, true, readBounded},
	"EXPIRE":  {keysFirst, true, readBounded},
	"PEXPIRE": {keysFirst, true, readBounded},
	"PERSIST": {keysFirst, true, readBounded},
	// hashes
	"HGET":    {keysFirst, false, readValues},
	"HMGET":   {keysFirst, false, readValues},
	"HGETALL": {keysFirst, false, readWhole},
	"HEXISTS": {keysFirst, false, readBounded},
	"HLEN":    {keysFirst, false, readBounded},
	"HKEYS":   {keysFirst, false, readWhole},
	"HVALS":   {keysFirst, false, readWhole},
	"HSCAN":   {keysFirst, false, readRange},
	"HSET":    {keysFirst, true, readBounded},
	"HSETNX":  {keysFirst, true, readBounded},
	"HDEL":    {keysFirst, true, readBounded},
	"HINCRBY": {keysFirst, true, readBounded},
	// sets
	"SMEMBERS":    {keysFirst, false, readWhole},
	"SISMEMBER":   {keysFirst, false, readBounded},
	"SMISMEMBER":  {keysFirst, false, readBounded},
	"SCARD":       {keysFirst, false, readBounded},
	"SSCAN":       {keysFirst, false, readRange},
	"SRANDMEMBER": {keysFirst, false, readRange},
	"SADD":        {keysFirst, true, readBounded},
	"SREM":        {keysFirst, true, readBounded},
	// sorted sets
	"ZSCORE":           {keysFirst, false, readBounded},
	"ZMSCORE":          {keysFirst, false, readBounded},
	"ZRANGE":           {keysFirst, false, readRange},
	"ZRANGEBYSCORE":    {keysFirst, false, readRange},
	"ZREVRANGE":        {keysFirst, false, readRange},
	"ZREVRANGEBYSCORE": {keysFirst, false, readRange},
	"ZCARD":            {keysFirst, false, readBounded},
	"ZCOUNT":           {keysFirst, false, readBounded},
	"ZRANK":            {keysFirst, false, readBounded},
	"ZSCAN":            {keysFirst, false, readRange},
	"ZADD":             {keysFirst, true, readBounded},
	"ZREM":             {keysFirst, true, readBounded},
	"ZINCRBY":          {keysFirst, true, readBounded},
	"ZREMRANGEBYSCORE": {keysFirst, true, readBounded},
	"ZREMRANGEBYRANK":  {keysFirst, true, readBounded},
	// lists and streams
	"LLEN":      {keysFirst, false, readBounded},
	"LRANGE":    {keysFirst, false, readRange},
	"XLEN":      {keysFirst, false, readBounded},
	"XRANGE":    {keysFirst, false, readRange},
	"XREVRANGE": {keysFirst, false, readRange},
	"LPUSH":     {keysFirst, true, readBounded},
	"RPUSH":     {keysFirst, true, readBounded},
	"LREM":      {keysFirst, true, readBounded},
	"LTRIM":     {keysFirst, true, readBounded},
	"XADD":      {keysFirst, true, readBounded},
	"XTRIM":     {keysFirst, true, readBounded},
}

// Supported reports whether the host can run a command for plugins.
func Supported(command string) bool {
	_, ok := commandTable[command]
	return ok
}

// SupportedCommands lists the commands plugins may declare, sorted (for
// error messages and documentation).
func SupportedCommands() []string {
	return slices.Sorted(maps.Keys(commandTable))
}

// Writes reports whether command changes data (and so is refused in dry
// runs). Unknown commands count as writes.
func Writes(command string) bool {
	spec, ok := commandTable[strings.ToUpper(command)]
	return !ok || spec.write
}
