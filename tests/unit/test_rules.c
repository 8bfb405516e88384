#include "unit/unit.h"
#include "common/rules.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>

static struct sockaddr_in v4(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

int main(void)
{
	struct dsock_rules r = { 0 };
	char err[256];
	int rule;

	ASSERT_EQ(dsock_glob_match("redis-*", "redis-server"), 1);
	ASSERT_EQ(dsock_glob_match("redis-*", "xredis-server"), 0);
	ASSERT_EQ(dsock_glob_match("ng?nx", "nginx"), 1);
	ASSERT_EQ(dsock_glob_match("*", ""), 1);
	ASSERT_EQ(dsock_glob_match("a*b*c", "aXXbYYc"), 1);
	ASSERT_EQ(dsock_glob_match("a*b*c", "aXXbYY"), 0);

	ASSERT_EQ(dsock_rules_parse_text(&r,
		"# comment\n\n deny program ssh*\nallow program *;deny port 22;deny port 6000-6010\n"
		"deny addr 10.0.0.0/8\nallow addr ::1/128\ndeny addr 2001:db8::/32", "t", err, sizeof(err)), 0);
	ASSERT_EQ(r.n, 7);
	ASSERT_EQ(dsock_rules_program_allowed(&r, "sshd"), 0);
	ASSERT_EQ(dsock_rules_program_allowed(&r, "redis-server"), 1);

	struct sockaddr_in lo = v4("127.0.0.1", 5000), p22 = v4("127.0.0.1", 22);
	struct sockaddr_in ten = v4("10.1.2.3", 80), eleven = v4("11.1.2.3", 80), x = v4("127.0.0.1", 6005);
	ASSERT_EQ(dsock_rules_conn_allowed(&r, (void *)&lo, (void *)&lo, &rule), 1);
	ASSERT_EQ(rule, -1);
	ASSERT_EQ(dsock_rules_conn_allowed(&r, (void *)&lo, (void *)&p22, &rule), 0);
	ASSERT_EQ(rule, 2);
	ASSERT_EQ(dsock_rules_conn_allowed(&r, (void *)&p22, (void *)&lo, &rule), 0); /* local port */
	ASSERT_EQ(dsock_rules_conn_allowed(&r, (void *)&lo, (void *)&x, &rule), 0);
	ASSERT_EQ(dsock_rules_conn_allowed(&r, (void *)&lo, (void *)&ten, &rule), 0);
	ASSERT_EQ(dsock_rules_conn_allowed(&r, (void *)&lo, (void *)&eleven, &rule), 1);

	struct sockaddr_in6 d = { .sin6_family = AF_INET6 };
	inet_pton(AF_INET6, "2001:db8::5", &d.sin6_addr);
	ASSERT_EQ(dsock_rules_conn_allowed(&r, NULL, (void *)&d, &rule), 0);
	inet_pton(AF_INET6, "2001:db9::5", &d.sin6_addr);
	ASSERT_EQ(dsock_rules_conn_allowed(&r, NULL, (void *)&d, &rule), 1);

	/* bad input: a clear error, nothing added */
	struct dsock_rules b = { 0 };
	const char *bad[] = { "permit port 1", "deny port", "deny port 70000", "deny port 5-3",
			      "deny port 5x", "deny addr 1.2.3.4/33", "deny addr nonsense",
			      "deny program /usr/bin/x", "deny colour red", "deny port 1 2" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		ASSERT_EQ(dsock_rules_parse_text(&b, bad[i], "t", err, sizeof(err)), -EINVAL);
		ASSERT_TRUE(strstr(err, "t:1: ") == err);
	}
	ASSERT_EQ(b.n, 0);
	for (int i = 0; i < DSOCK_RULES_MAX; i++)
		ASSERT_EQ(dsock_rules_parse_line(&b, "deny port 1", err, sizeof(err)), 0);
	ASSERT_EQ(dsock_rules_parse_line(&b, "deny port 1", err, sizeof(err)), -ENOSPC);
	UNIT_DONE();
}
