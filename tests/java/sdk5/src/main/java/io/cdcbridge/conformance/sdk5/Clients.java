package io.cdcbridge.conformance.sdk5;

import com.alicloud.openservices.tablestore.ClientConfiguration;
import com.alicloud.openservices.tablestore.SyncClient;
import com.alicloud.openservices.tablestore.core.auth.DefaultCredentialProvider;
import com.alicloud.openservices.tablestore.core.auth.DefaultCredentials;
import com.alicloud.openservices.tablestore.core.auth.V4Credentials;
import io.cdcbridge.conformance.Settings;

/** SDK 5.x clients signed the ways the service accepts: V2 (access key), V4 (derived per region), with an STS token. */
final class Clients {
    private Clients() {}

    static ClientConfiguration configuration() {
        ClientConfiguration configuration = new ClientConfiguration();
        configuration.setConnectionTimeoutInMillisecond(10_000);
        configuration.setSocketTimeoutInMillisecond(60_000);
        return configuration;
    }

    static SyncClient v2(Settings settings) {
        return new SyncClient(settings.endpoint(), settings.accessKeyId(), settings.accessKeySecret(),
                settings.instance(), configuration());
    }

    static SyncClient v2WithSecret(Settings settings, String secret) {
        return new SyncClient(settings.endpoint(), settings.accessKeyId(), secret, settings.instance(),
                configuration());
    }

    static SyncClient v2WithStsToken(Settings settings, String token) {
        return new SyncClient(settings.endpoint(), settings.accessKeyId(), settings.accessKeySecret(),
                settings.instance(), configuration(), token);
    }

    static SyncClient v4(Settings settings, String region) {
        DefaultCredentials credentials = new DefaultCredentials(settings.accessKeyId(), settings.accessKeySecret());
        V4Credentials v4 = V4Credentials.createByServiceCredentials(credentials, region);
        return new SyncClient(settings.endpoint(), new DefaultCredentialProvider(v4), settings.instance(),
                configuration(), null);
    }
}
