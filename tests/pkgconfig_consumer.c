/* Built by check_pkgconfig.sh against an installed tree via pkg-config,
 * with EXPECTED_VERSION the version vrange.pc gives (the project's). */
#include <stdio.h>
#include <string.h>
#include <vrange.h>

int main(void)
{
	const char *v = vrange_version();

	if (!v || strcmp(v, EXPECTED_VERSION) != 0) {
		fprintf(stderr, "unexpected version %s\n", v ? v : "(null)");
		return 1;
	}
	printf("linked libvrange %s through pkg-config\n", v);
	return 0;
}
