package main
import _ "github.com/pganalyze/pg_query_go/v6"
func main(){}
