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
}

// commandTable lists the commands plugins may declare. It is deliberately
// small: single-key data commands, the multi-key commands whose arguments
// are all keys, and two keyless ones. Commands with keys in other places
// (MSET, SORT, ZUNIONSTORE, RENAME, COPY, EVAL...) and administrative
// commands are absent, so they are refused.
var commandTable = map[string]cmdSpec{
	// keyless
	"TIME": {keysNone, false},
	"PING": {keysNone, false},
	// multi-key, all arguments are keys
	"DEL":    {keysAll, true},
	"UNLINK": {keysAll, true},
	"EXISTS": {keysAll, false},
	"MGET":   {keysAll, false},
	// strings and generic
	"GET":     {keysFirst, false},
	"STRLEN":  {keysFirst, false},
	"TYPE":    {keysFirst, false},
	"TTL":     {keysFirst, false},
	"PTTL":    {keysFirst, false},
	"SET":     {keysFirst, true},
	"INCR":    {keysFirst, true},
	"INCRBY":  {keysFirst, true},
	"DECR":    {keysFirst, true},
	"DECRBY":  {keysFirst, true},
	"EXPIRE":  {keysFirst, true},
	"PEXPIRE": {keysFirst, true},
	"PERSIST": {keysFirst, true},
	// hashes
	"HGET":    {keysFirst, false},
	"HMGET":   {keysFirst, false},
	"HGETALL": {keysFirst, false},
	"HEXISTS": {keysFirst, false},
	"HLEN":    {keysFirst, false},
	"HKEYS":   {keysFirst, false},
	"HVALS":   {keysFirst, false},
	"HSCAN":   {keysFirst, false},
	"HSET":    {keysFirst, true},
	"HSETNX":  {keysFirst, true},
	"HDEL":    {keysFirst, true},
	"HINCRBY": {keysFirst, true},
	// sets
	"SMEMBERS":    {keysFirst, false},
	"SISMEMBER":   {keysFirst, false},
	"SMISMEMBER":  {keysFirst, false},
	"SCARD":       {keysFirst, false},
	"SSCAN":       {keysFirst, false},
	"SRANDMEMBER": {keysFirst, false},
	"SADD":        {keysFirst, true},
	"SREM":        {keysFirst, true},
	// sorted sets
	"ZSCORE":           {keysFirst, false},
	"ZMSCORE":          {keysFirst, false},
	"ZRANGE":           {keysFirst, false},
	"ZRANGEBYSCORE":    {keysFirst, false},
	"ZREVRANGE":        {keysFirst, false},
	"ZREVRANGEBYSCORE": {keysFirst, false},
	"ZCARD":            {keysFirst, false},
	"ZCOUNT":           {keysFirst, false},
	"ZRANK":            {keysFirst, false},
	"ZSCAN":            {keysFirst, false},
	"ZADD":             {keysFirst, true},
	"ZREM":             {keysFirst, true},
	"ZINCRBY":          {keysFirst, true},
	"ZREMRANGEBYSCORE": {keysFirst, true},
	"ZREMRANGEBYRANK":  {keysFirst, true},
	// lists and streams
	"LLEN":      {keysFirst, false},
	"LRANGE":    {keysFirst, false},
	"XLEN":      {keysFirst, false},
	"XRANGE":    {keysFirst, false},
	"XREVRANGE": {keysFirst, false},
	"LPUSH":     {keysFirst, true},
	"RPUSH":     {keysFirst, true},
	"LREM":      {keysFirst, true},
	"LTRIM":     {keysFirst, true},
	"XADD":      {keysFirst, true},
	"XTRIM":     {keysFirst, true},
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
